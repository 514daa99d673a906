"""Quotas: the pure model, the preflight check every submit path uses, stores, the hub service."""
