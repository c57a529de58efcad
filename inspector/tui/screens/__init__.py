"""Screens of the inspector app: main, help, wiring editor, go-to, doctor."""
