"""Pulumi programs and components; dynamic providers are thin adapters over workflows."""
