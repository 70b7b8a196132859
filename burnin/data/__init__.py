"""Package data: the XID catalog (``xid_catalog.csv``); see ``burnin.parsers.xid`` for its source."""
