"""Unit tests of the back-end passes: tiling, schedules, listings, the device ops each layer kind
runs."""
