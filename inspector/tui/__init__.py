"""The Textual app (`eagle-inspect open`). Importing this package imports neither torch nor numpy."""
