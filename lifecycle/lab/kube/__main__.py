"""``python -m lifecycle.lab.kube --kubeconfig PATH``: serve the stand-in until SIGTERM."""

import sys

from lifecycle.lab.kube.run import main

sys.exit(main())
