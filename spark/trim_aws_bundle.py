"""Trims the AWS SDK bundle jar to the services s3a can use.

hadoop-aws 3.5.0 depends on `software.amazon.awssdk:bundle` (686 MB, 411 services) for its
shading: the SDK's netty, jackson and HTTP clients are relocated inside it and cannot clash
with Spark's. Hadoop uses S3, STS (assumed roles, web identity) and KMS (encryption) from it,
and the SDK's profile credentials load SSO and SSO-OIDC by reflection. Every other service
package is dropped, the rest is copied byte for byte: the image carries 24 MB of it, not 686.

    python spark/trim_aws_bundle.py JAR_DIR     # bundle-<v>.jar -> aws-sdk-bundle-s3-<v>.jar

Idempotent: a folder without a bundle-*.jar is left as it is.
"""

from __future__ import annotations

import sys
import zipfile
from pathlib import Path

SERVICES = "software/amazon/awssdk/services/"
KEEP = frozenset({"s3", "s3control", "sts", "kms", "sso", "ssooidc"})


def kept(name: str) -> bool:
    """Whether an entry of the bundle stays: everything but other services' packages."""
    if not name.startswith(SERVICES):
        return True
    service = name[len(SERVICES):].split("/", 1)[0]
    return service in KEEP or name == SERVICES


def trim(bundle: Path) -> Path:
    """Writes the trimmed jar beside BUNDLE, then removes BUNDLE; returns the new path."""
    version = bundle.stem.removeprefix("bundle-")
    target = bundle.with_name(f"aws-sdk-bundle-s3-{version}.jar")
    partial = target.with_suffix(".tmp")
    with zipfile.ZipFile(bundle) as source, zipfile.ZipFile(partial, "w") as out:
        for entry in source.infolist():
            if kept(entry.filename):
                out.writestr(entry, source.read(entry), compress_type=entry.compress_type)
    partial.replace(target)
    bundle.unlink()
    return target


USAGE = "usage: python spark/trim_aws_bundle.py JAR_DIR"


def main(argv: list[str]) -> int:
    """Trims every bundle-*.jar in the folder argv[1]; 2 (a usage error) without one."""
    if len(argv) != 2:
        print(USAGE, file=sys.stderr)
        return 2
    for bundle in sorted(Path(argv[1]).glob("bundle-*.jar")):
        print(f"trim_aws_bundle: {bundle.name} -> {trim(bundle).name}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
