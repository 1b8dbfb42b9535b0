"""pycoll's tools, apart from the library they measure: `pycoll bench` (bench/), `pycoll tune` (tuning), the
accuracy report (accuracy) and the simulator of N ranks in one process (simulate). The user API is the top of
the package; nothing in it imports from here."""
