"""Tor's own abuse defences for the source onion: the settings and where they go.

With ``--tor launch`` the source onion is a torrc ``HiddenServiceDir`` service: only that kind
can export circuit ids (``HiddenServiceExportCircuitID haproxy``), and writing it in the torrc
at launch means no later ``SETCONF`` (any SETCONF resets the PoW state of every such service).
An attached Tor (``--tor control:``) gets the same defences through ``ADD_ONION`` keywords,
minus the circuit ids, which ``ADD_ONION`` cannot export.
"""
from __future__ import annotations

from dataclasses import dataclass

# Why these numbers: a drop box sees far fewer than one new rendezvous circuit a second (Tor
# Browser keeps one circuit per site for ~10 minutes), so 5 a second is 18,000 new visitors an
# hour. Tor's defaults (250/s, burst 2500) suit big sites; a queue that builds only above a
# much higher rate would let a flood through to a 2-core server before the suggested effort
# moves. Above the rate, requests queue by PoW effort and clients that solve more go first.
POW_QUEUE_RATE = 5
POW_QUEUE_BURST = 50
# Intro-point rate limit (Tor's defaults): excess INTRODUCE2 cells are dropped by the
# introduction points before they cost the service anything.
INTRO_DOS_RATE = 25
INTRO_DOS_BURST = 200
# Simultaneous streams on one rendezvous circuit. A browser opens at most 6 connections per
# site; a circuit that opens more is flooding and is closed with all its streams.
MAX_STREAMS = 16


@dataclass(frozen=True)
class Defences:
    """What to turn on for the source onion."""

    pow: bool = True  # --tor-pow on|off
    pow_queue_rate: int = POW_QUEUE_RATE
    pow_queue_burst: int = POW_QUEUE_BURST
    intro_dos_rate: int = INTRO_DOS_RATE
    intro_dos_burst: int = INTRO_DOS_BURST
    max_streams: int = MAX_STREAMS

    def __post_init__(self) -> None:
        if not 0 < self.pow_queue_rate <= self.pow_queue_burst:
            raise ValueError("the PoW queue burst must be at least the rate, and the rate positive")
        if not 0 < self.intro_dos_rate <= self.intro_dos_burst:
            raise ValueError("the intro DoS burst must be at least the rate, and the rate positive")
        if not 0 < self.max_streams < 65536:
            raise ValueError("max_streams must be between 1 and 65535")


def parse_pow_switch(value: str) -> bool:
    """``--tor-pow on|off``."""
    text = str(value).strip().lower()
    if text in ("on", "yes", "1", "true"):
        return True
    if text in ("off", "no", "0", "false"):
        return False
    raise ValueError(f"--tor-pow {value!r}: expected 'on' or 'off'")


def has_pow_module(list_modules_output: str) -> bool:
    """From ``tor --list-modules`` (``pow: yes`` lines; older Tors do not list it at all)."""
    for line in list_modules_output.splitlines():
        name, _, state = line.partition(":")
        if name.strip() == "pow":
            return state.strip() == "yes"
    return False


def _torrc_value(target: str) -> str:
    if target.startswith("unix:"):
        return f'unix:"{target[len("unix:"):]}"'
    return target


def hidden_service_lines(directory: str, target: str, defences: Defences, pow_available: bool) -> list[str]:
    """The torrc block of the source onion: port 80 -> ``target`` (a PROXY-header listener)."""
    lines = [
        f"HiddenServiceDir {directory}",
        f"HiddenServicePort 80 {_torrc_value(target)}",
        # Each connection starts with "PROXY TCP6 fc00:dead:beef:4dad::HI:LO ...": its circuit.
        "HiddenServiceExportCircuitID haproxy",
        f"HiddenServiceMaxStreams {defences.max_streams}",
        "HiddenServiceMaxStreamsCloseCircuit 1",
        "HiddenServiceEnableIntroDoSDefense 1",
        f"HiddenServiceEnableIntroDoSRatePerSec {defences.intro_dos_rate}",
        f"HiddenServiceEnableIntroDoSBurstPerSec {defences.intro_dos_burst}",
    ]
    if defences.pow and pow_available:
        lines += [
            "HiddenServicePoWDefensesEnabled 1",
            f"HiddenServicePoWQueueRate {defences.pow_queue_rate}",
            f"HiddenServicePoWQueueBurst {defences.pow_queue_burst}",
        ]
    return lines


def add_onion_keywords(defences: Defences) -> list[str]:
    """The same defences as ``ADD_ONION`` keywords (attached Tor). The intro-point DoS
    defence has no ADD_ONION keyword; an attached Tor keeps its own torrc's setting."""
    words = [f"MaxStreams={defences.max_streams}", "Flags=MaxStreamsCloseCircuit"]
    if defences.pow:
        words += [
            "PoWDefensesEnabled=1",
            f"PoWQueueRate={defences.pow_queue_rate}",
            f"PoWQueueBurst={defences.pow_queue_burst}",
        ]
    return words
