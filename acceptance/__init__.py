"""Rack acceptance on the controller: fan burn-in out, judge results, write evidence and reports."""
