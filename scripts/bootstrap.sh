#!/usr/bin/env bash
# Installs what racklife's tests and lab need on Debian 12, then nox in its own venv.
# Idempotent: a second run installs nothing and takes a second.
set -euo pipefail
cd "$(dirname "$0")/.."

DEBIAN_PACKAGES=(
  python3 python3-venv python3-pip python3-dev python3-apt gcc git ca-certificates
  postgresql-15                                   # store tests on PostgreSQL (initdb/pg_ctl)
  slurmctld slurmd slurm-client munge slurmrestd slurm-wlm-jwt-plugin   # real Slurm in the lab
  slurmdbd mariadb-server                         # Slurm accounting (slurmdbd with MariaDB) in the lab
  openssh-server openssh-client iproute2 procps util-linux psmisc        # lab nodes in netns
  ipmitool openipmi                                # IPMI cross-checks
  qemu-system-x86 ipxe-qemu busybox-static dnsmasq # network boot of the minimal image
  openssl
  debootstrap squashfs-tools                      # Debian image build; Slurm 24.11 root for topology/block
  chromium                                         # renders the acceptance HTML report in tests
  containerd runc conntrack socat ethtool iptables # the kube_node role (its Debian part; containerd checks its config)
  prometheus                                       # promtool for the alert rules; a test scrapes racklife
)

missing=()
for p in "${DEBIAN_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  echo "bootstrap: installing Debian packages: ${missing[*]}"
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# The tests start their own Prometheus on loopback with a temp config; the package's service
# (listening on :9090 with a default config) is not wanted.
if command -v systemctl >/dev/null 2>&1 && systemctl is-enabled prometheus >/dev/null 2>&1; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  # No --now: on a machine without systemd as PID 1 (containers, CI) stopping needs the bus and fails;
  # disabling only edits the unit links and works everywhere. Stop it separately where it runs.
  $SUDO systemctl disable prometheus
  if [ -d /run/systemd/system ]; then $SUDO systemctl stop prometheus; fi
fi

if [ ! -x .bootstrap/venv/bin/nox ]; then
  python3 -m venv .bootstrap/venv
  .bootstrap/venv/bin/pip install -q --upgrade pip
  .bootstrap/venv/bin/pip install -q "nox>=2024.4"
fi
