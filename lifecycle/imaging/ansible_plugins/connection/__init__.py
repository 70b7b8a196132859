"""Connection plugins: racklife_chroot, for image builds."""
