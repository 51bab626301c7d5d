"""spark/trim_aws_bundle.py: the AWS SDK bundle keeps what s3a uses, byte for byte, and
nothing of the other services."""

from __future__ import annotations

import importlib.util
import zipfile
from pathlib import Path

from kafkube.harness.checkout import REPO

spec = importlib.util.spec_from_file_location("trim_aws_bundle",
                                              REPO / "spark" / "trim_aws_bundle.py")
assert spec is not None and spec.loader is not None
trim_aws_bundle = importlib.util.module_from_spec(spec)
spec.loader.exec_module(trim_aws_bundle)

ENTRIES = {
    "META-INF/MANIFEST.MF": b"Manifest-Version: 1.0\n",
    "software/amazon/awssdk/core/SdkBytes.class": b"core",
    "software/amazon/awssdk/thirdparty/io/netty/Channel.class": b"netty",
    "software/amazon/awssdk/services/": b"",
    "software/amazon/awssdk/services/s3/S3Client.class": b"s3",
    "software/amazon/awssdk/services/s3control/S3ControlClient.class": b"s3control",
    "software/amazon/awssdk/services/sts/StsClient.class": b"sts",
    "software/amazon/awssdk/services/ssooidc/SsoOidcClient.class": b"ssooidc",
    "software/amazon/awssdk/services/ec2/Ec2Client.class": b"ec2",
    "software/amazon/awssdk/services/s3outposts/Client.class": b"s3outposts",
    "software/amazon/awssdk/services/sagemaker/Client.class": b"sagemaker",
}
DROPPED = {"software/amazon/awssdk/services/ec2/Ec2Client.class",
           "software/amazon/awssdk/services/s3outposts/Client.class",
           "software/amazon/awssdk/services/sagemaker/Client.class"}


def test_the_bundle_keeps_s3_sts_and_the_core_and_drops_other_services(tmp_path: Path) -> None:
    with zipfile.ZipFile(tmp_path / "bundle-2.35.4.jar", "w", zipfile.ZIP_DEFLATED) as jar:
        for name, data in ENTRIES.items():
            jar.writestr(name, data)
        jar.writestr(zipfile.ZipInfo("stored.txt"), b"kept as stored")

    assert trim_aws_bundle.main(["trim", str(tmp_path)]) == 0

    assert sorted(p.name for p in tmp_path.iterdir()) == ["aws-sdk-bundle-s3-2.35.4.jar"]
    with zipfile.ZipFile(tmp_path / "aws-sdk-bundle-s3-2.35.4.jar") as jar:
        kept = {i.filename: i for i in jar.infolist()}
        assert set(kept) == (set(ENTRIES) - DROPPED) | {"stored.txt"}
        for name in kept:
            assert jar.read(name) == ENTRIES.get(name, b"kept as stored")
        assert kept["stored.txt"].compress_type == zipfile.ZIP_STORED
        assert kept["software/amazon/awssdk/services/s3/S3Client.class"].compress_type \
            == zipfile.ZIP_DEFLATED
    # Run again on the trimmed folder: nothing left to do, nothing changed.
    assert trim_aws_bundle.main(["trim", str(tmp_path)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["aws-sdk-bundle-s3-2.35.4.jar"]


def test_a_wrong_command_line_is_a_usage_error() -> None:
    assert trim_aws_bundle.main(["trim"]) == 2
