"""Quotas: the pure model (limits, resolution, the fit check, reports) and where settings are stored."""
