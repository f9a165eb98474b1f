"""animfleet: the pieces every component shares (topology, job records, settings, logging, CLI)."""
