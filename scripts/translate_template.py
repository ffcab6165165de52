"""Translate infra/template.yaml with SAM's own translator, offline, into the
CloudFormation template `sam deploy` would create, for cfn-lint to check every rule on it
(`sam validate --lint` lints the SAM form only and misses rules such as E3505).

Usage: translate_template.py TEMPLATE OUT.json
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
    for name, resource in template.get("Resources", {}).items():
        props = resource.get("Properties", {})
        code = str(props.get("CodeUri", "s3://"))
        if resource.get("Type") == "AWS::Serverless::Function" and not code.startswith("s3://"):
            props["CodeUri"] = f"s3://tessera-artifacts/{name}.zip"
    translated = transform(template, {}, OfflinePolicies())
    with open(sys.argv[2], "w") as out:
        json.dump(translated, out, indent=1, default=str)


if __name__ == "__main__":
    main()
