"""The doctor's checks, one module per concern: its facts, its run, its severity and its words
(the table in docs/doctor.md). `diagnose` runs them in order."""
