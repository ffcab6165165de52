"""Translate infra/template.yaml with SAM's own translator, offline, into the
CloudFormation template `sam deploy` would create, for cfn-lint to check every rule on it
(`sam validate --lint` lints the SAM form only and misses rules such as E3505).

Usage: translate_template.py TEMPLATE OUT.json [PACKAGES.json]

PACKAGES.json, if given, records what each function's package is built from (its crate
folder for a zip, its Dockerfile for an image): the deploy rehearsal runs that.
"""

import json
import sys

from samtranslator.translator.transform import transform
from samtranslator.yaml_helper import yaml_parse


class OfflinePolicies:
    """The template names no AWS managed policies, so none need looking up."""

    def load(self):
        return {}


def main() -> None:
    with open(sys.argv[1]) as f:
        template = yaml_parse(f.read())
    # What `sam package` does to local code: it becomes an object in the artifact bucket.
    # A container-image function's image becomes one in the stack's ECR repository.
    packages = {}
    for name, resource in template.get("Resources", {}).items():
        if resource.get("Type") != "AWS::Serverless::Function":
            continue
        props = resource.setdefault("Properties", {})
        meta = resource.get("Metadata", {})
        packages[name] = (
            {"image": meta["Dockerfile"]} if props.get("PackageType") == "Image"
            else {"zip": str(props.get("CodeUri", "")).replace("../", "", 1)}
        )
        if props.get("PackageType") == "Image":
            props.setdefault(
                "ImageUri",
                f"123456789012.dkr.ecr.us-east-1.amazonaws.com/tessera:{name.lower()}",
            )
        elif not str(props.get("CodeUri", "s3://")).startswith("s3://"):
            props["CodeUri"] = f"s3://tessera-artifacts/{name}.zip"
    translated = transform(template, {}, OfflinePolicies())
    with open(sys.argv[2], "w") as out:
        json.dump(translated, out, indent=1, default=str)
    if len(sys.argv) > 3:
        with open(sys.argv[3], "w") as out:
            json.dump(packages, out, indent=1)


if __name__ == "__main__":
    main()
