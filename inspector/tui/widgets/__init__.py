"""Widgets of the inspector app."""
