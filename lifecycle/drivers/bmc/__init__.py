"""BMC drivers: one interface (base.BmcDriver), Redfish and IPMI implementations, and a fake."""
