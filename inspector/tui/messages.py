"""Textual messages of the app that are not a widget's own."""

from __future__ import annotations

from textual.message import Message

from inspector.tui import events


class DeviceEvent(Message):
    """One report of the device thread (an `inspector.tui.events` object), delivered to the main
    screen on the UI thread (`MainScreen.on_device_event` dispatches on its type)."""

    def __init__(self, event: events.Event) -> None:
        super().__init__()
        self.event = event
