"""Which torch releases fp4patch supports in the target environment, read without importing torch.

The supported range is torch 2.7 (:data:`fp4patch.ops.redirect.TORCH_FLOOR`) or newer, tested up to
:data:`NEWEST_TESTED` (``docs/compatibility.md``, the torch × FlashInfer table of ``make test-torch``).
Why 2.7: FlashInfer 0.7.2 and newer import only on torch 2.7 or newer (they read
``torch.float8_e8m0fnu`` at import), and 2.7 is the first torch with Blackwell (sm_100, CUDA 12.8)
builds, which NVFP4 kernels need; fp4patch relies on ``torch.library.custom_op`` (2.4) and
``torch.compiler.substitute_in_graph`` (2.5) besides.

Below the floor, ``apply`` and ``verify`` refuse in one line before anything is written, and a FlashInfer
patched under another torch and imported under such a one behaves as unpatched (the rendered code checks
the same floor: ``fp4patch/ops/redirect.py``, ``_STATE``). A newer torch than :data:`NEWEST_TESTED` is not
refused (a Docker build must not break on the day torch ships); ``verify --trace`` is its check.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import EnvironmentProblem
from ..ops.redirect import TORCH_FLOOR

if TYPE_CHECKING:
    from .environment import TargetEnvironment

#: The newest torch release the test matrix ran on (``make test-torch``; docs/compatibility.md).
NEWEST_TESTED = "2.15.0"
#: The supported range as a version specifier, for messages and docs.
SUPPORTED = f">={TORCH_FLOOR[0]}.{TORCH_FLOOR[1]}"


def installed_torch(env: TargetEnvironment) -> str | None:
    """The version of the ``torch`` distribution on ``env``'s import path (its METADATA, through
    :mod:`importlib.metadata`; torch is not imported), or None when none is installed there. With
    ``--site-packages D --python P`` the path is D then P's (``env.torch_paths``): P imports D's FlashInfer."""
    from importlib import metadata

    for dist in metadata.distributions(name="torch", path=list(env.torch_paths or env.paths)):
        version = dist.metadata["Version"]
        if version:
            return str(version)
    return None


def supported(version: str) -> bool:
    """Whether torch ``version`` (``2.11.0``, ``2.13.0+cpu``, ``2.8.0a0+git…``) is at or above the floor;
    its release numbers decide, so a pre-release or local build of a supported minor counts."""
    from packaging.version import InvalidVersion, Version

    try:
        release = Version(version).release
    except InvalidVersion:
        return False
    return tuple(release[:2]) >= TORCH_FLOOR


def check_torch(env: TargetEnvironment, command: str) -> str | None:
    """Refuse a target environment whose torch is below the supported range; return its torch version
    (None when torch is not installed there: the static commands need none).

    Args:
        env: the target environment (``--python`` / ``--site-packages`` / this interpreter's).
        command: the command refusing, for the message (``apply``, ``verify``).

    Raises:
        EnvironmentProblem: torch below 2.7 is installed there (exit 2): one line naming the torch, the
            environment, the supported range and what to do.
    """
    version = installed_torch(env)
    if version is not None and not supported(version):
        raise EnvironmentProblem(
            f"{env.description}: torch {version} is older than fp4patch supports (torch {SUPPORTED}, tested up to "
            f"{NEWEST_TESTED}) and a patched FlashInfer stays unpatched under it; `fp4patch {command}` did nothing: "
            f"upgrade torch to {TORCH_FLOOR[0]}.{TORCH_FLOOR[1]} or newer"
        )
    return version
