"""Network boot: dnsmasq configuration, per-node iPXE scripts, and the HTTP boot server."""
