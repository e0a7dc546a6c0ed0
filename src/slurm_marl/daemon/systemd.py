"""The sd_notify protocol: one datagram to $NOTIFY_SOCKET (READY=1, WATCHDOG=1, STATUS=...).

No dependency needed; silently nothing when not started by systemd."""

from __future__ import annotations

import os
import socket


class Notifier:
    def __init__(self, address: str | None = None) -> None:
        self.address = address if address is not None else os.environ.get("NOTIFY_SOCKET", "")
        usec = os.environ.get("WATCHDOG_USEC", "")
        self.watchdog_s = int(usec) / 1e6 if usec.isdigit() else None

    @property
    def enabled(self) -> bool:
        return bool(self.address)

    def notify(self, message: str) -> bool:
        if not self.address:
            return False
        addr = self.address
        if addr.startswith("@"):  # abstract namespace
            addr = "\0" + addr[1:]
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
                sock.connect(addr)
                sock.sendall(message.encode())
            return True
        except OSError:
            return False

    def ready(self, status: str = "") -> bool:
        return self.notify("READY=1" + (f"\nSTATUS={status}" if status else ""))

    def watchdog(self) -> bool:
        return self.notify("WATCHDOG=1")

    def status(self, text: str) -> bool:
        return self.notify(f"STATUS={text}")

    def stopping(self) -> bool:
        return self.notify("STOPPING=1")
