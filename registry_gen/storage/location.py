"""`storage: s3://BUCKET/PREFIX`: where an object store keeps content/ (pure; no boto3 here)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from registry_gen.errors import ConfigError

# S3's bucket naming rule (lowercase letters, digits, dots and hyphens, 3 to 63, alphanumeric at
# both ends); every S3-compatible store we know accepts at least these.
BUCKET_NAME = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")


@dataclass(frozen=True)
class S3Location:
    bucket: str
    prefix: str  # '' or segments joined by '/', without a leading or trailing '/'

    def __str__(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}" if self.prefix else f"s3://{self.bucket}"


def parse_s3_url(url: str) -> S3Location:
    """`s3://BUCKET` or `s3://BUCKET/PREFIX`; ConfigError (one line) for anything else."""
    usage = f"storage must be s3://BUCKET or s3://BUCKET/PREFIX (an S3-compatible bucket); got {url!r}"
    if not isinstance(url, str) or not url.startswith("s3://"):
        raise ConfigError(usage)
    bucket, _, prefix = url.removeprefix("s3://").partition("/")
    if not BUCKET_NAME.fullmatch(bucket) or ".." in bucket:
        raise ConfigError(f"{usage}: {bucket!r} is not a bucket name (3-63 lowercase letters, digits, '.' or '-')")
    prefix = prefix.strip("/")
    if prefix and any(part in ("", ".", "..") or part.startswith(".") for part in prefix.split("/")):
        raise ConfigError(f"{usage}: the prefix {prefix!r} has an empty or dot segment")
    return S3Location(bucket, prefix)
