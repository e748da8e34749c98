"""Free TCP ports on 127.0.0.1 for the processes a test starts."""

from __future__ import annotations

from app.launch.plan import free_ports

__all__ = ["free_port", "free_ports"]


def free_port() -> int:
    """One port free now, below the ephemeral range (as the launcher picks its own)."""
    return free_ports(1)[0]
