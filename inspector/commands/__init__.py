"""The work behind each CLI command: resolve inputs, call the engine, render the result."""
