"""Golden image builds: definitions in images/, turned into kernel, initrd, root image and a manifest."""
