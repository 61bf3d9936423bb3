"""Amaranth gateware of the chipotle accelerator."""
