"""Shared cocotb verification components (drivers, monitors, helpers) for chipotle."""
