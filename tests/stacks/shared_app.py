"""Operations of one Pulumi provider host entering and leaving its shared Controller at once, as the
engine's parallel operations do; run as a subprocess by test_provider_checks (DBOS is one per process).

argv: DB_URL THREADS ROUNDS. Each thread, ROUNDS times: enter ``SHARED.controller``, run one workflow
through it to its end, leave. Prints ``ok N`` (the runs that ended) or the first error.
"""

from __future__ import annotations

import random
import sys
import threading
import time

from dbos import DBOS

from lifecycle.store import shared_store
from stacks.racklife_pulumi.shared import Shared

URL, THREADS, ROUNDS = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])


@DBOS.workflow()
def one_run(n: int) -> int:
    return n


shared_store(URL)
host = Shared()
errors: list[str] = []
done: list[int] = []


def operation(t: int) -> None:
    rng = random.Random(t)
    for r in range(ROUNDS):
        time.sleep(rng.uniform(0, 0.4))  # operations arrive at any moment, one as another's DBOS shuts down
        try:
            with host.controller(lambda _m: None, "shared-test") as ctl:
                done.append(ctl.start(one_run, t * 100 + r, nodes=[]).get_result())
        except Exception as exc:  # reported: the test fails on any
            errors.append(f"{type(exc).__name__}: {exc}")


threads = [threading.Thread(target=operation, args=(t,)) for t in range(THREADS)]
for th in threads:
    th.start()
for th in threads:
    th.join()
print(f"error {errors[0]}" if errors else f"ok {len(done)}", flush=True)
