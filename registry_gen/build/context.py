"""What every phase of one build knows and nobody changes: the settings, the signer, the settings
fingerprint, whether the build writes everything again, and where it reports progress."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from registry_gen.settings import Settings
from registry_gen.signing import Signer


ProgressCallback = Callable[[str, int, int], None]


@dataclass(frozen=True)
class BuildContext:
    settings: Settings
    fingerprint: str = ""  # the settings and templates this build renders with (detect.settings_fingerprint)
    full: bool = False  # every package and listing is written again
    signer: Signer | None = None
    progress: ProgressCallback | None = None
