"""The stack as `sam deploy` creates it, on moto: the translated template goes to moto's
CloudFormation; the few resource types moto's CloudFormation does not create are created
from the *same translated properties* through the service APIs; then everything a
function runs with is read back from the deployed resources, never from the template.
"""

import io
import json
import zipfile

# Resource types moto's CloudFormation skips, and how each is applied through its API.
APPLIED_BY_API = ("AWS::Lambda::Url", "AWS::SQS::QueuePolicy", "AWS::CloudWatch::Alarm")


class Stack:
    def __init__(self, clients, name, template, parameters):
        self.c = clients
        self.name = name
        self.template = template
        self.parameters = parameters
        self.physical = {}
        self.not_created = []

    # -- creation ------------------------------------------------------------------------

    def create(self, layer_zip):
        """Create the stack; returns the layer ARN the face functions were given."""
        c = self.c
        c.s3.create_bucket(Bucket="tessera-artifacts")
        code = io.BytesIO()
        with zipfile.ZipFile(code, "w") as z:
            z.writestr("bootstrap", "the rehearsal runs the workspace's binary instead")
        for r in self.template["Resources"].values():
            s3code = r.get("Properties", {}).get("Code", {})
            if r["Type"] == "AWS::Lambda::Function" and "S3Key" in s3code:
                c.s3.put_object(Bucket=s3code["S3Bucket"], Key=s3code["S3Key"], Body=code.getvalue())
        with open(layer_zip, "rb") as f:
            layer = c.lam.publish_layer_version(
                LayerName="tessera-face-runtime",
                Content={"ZipFile": f.read()},
                CompatibleRuntimes=["provided.al2023"],
                CompatibleArchitectures=[self.parameters.get("Architecture", "x86_64")],
            )["LayerVersionArn"]
        params = dict(self.parameters, FaceRuntimeLayerArn=layer)
        for_moto = json.loads(json.dumps(self.template))
        skipped = {n: r for n, r in for_moto["Resources"].items() if r["Type"] in APPLIED_BY_API}
        for n in skipped:
            del for_moto["Resources"][n]
        for o in list(for_moto.get("Outputs", {})):
            if any(n in json.dumps(for_moto["Outputs"][o]) for n in skipped):
                del for_moto["Outputs"][o]
        c.cfn.create_stack(
            StackName=self.name,
            TemplateBody=json.dumps(for_moto),
            Parameters=[{"ParameterKey": k, "ParameterValue": v} for k, v in params.items()],
            Capabilities=["CAPABILITY_IAM"],
        )
        status = c.cfn.describe_stacks(StackName=self.name)["Stacks"][0]
        if status["StackStatus"] != "CREATE_COMPLETE":
            raise SystemExit(f"stack {self.name}: {status['StackStatus']} {status.get('StackStatusReason')}")
        for r in c.cfn.list_stack_resources(StackName=self.name)["StackResourceSummaries"]:
            self.physical[r["LogicalResourceId"]] = r["PhysicalResourceId"]
        self.params = params
        for n, r in skipped.items():
            if not self._condition_holds(r):
                continue
            self._apply(n, r)
        self._reapply_dropped()
        return layer

    def _condition_holds(self, resource):
        cond = resource.get("Condition")
        if not cond:
            return True
        expr = self.template["Conditions"][cond]
        # The template's conditions are all `Not [Equals [Ref P, ""]]`.
        ref = expr["Fn::Not"][0]["Fn::Equals"][0]["Ref"]
        return self.params.get(ref, self.template["Parameters"][ref].get("Default", "")) != ""

    def _apply(self, name, r):
        p = self.resolve(r["Properties"])
        c = self.c
        if r["Type"] == "AWS::Lambda::Url":
            c.lam.create_function_url_config(
                FunctionName=p["TargetFunctionArn"], AuthType=p["AuthType"],
                **({"InvokeMode": p["InvokeMode"]} if "InvokeMode" in p else {}),
            )
        elif r["Type"] == "AWS::SQS::QueuePolicy":
            for url in p["Queues"]:
                c.sqs.set_queue_attributes(QueueUrl=url, Attributes={"Policy": json.dumps(p["PolicyDocument"])})
        elif r["Type"] == "AWS::CloudWatch::Alarm":
            args = {k: v for k, v in p.items() if k not in ("Dimensions",)}
            args["Dimensions"] = [{"Name": d["Name"], "Value": d["Value"]} for d in p.get("Dimensions", [])]
            # CloudFormation names an unnamed alarm after its stack and logical id.
            args.setdefault("AlarmName", f"{self.name}-{name}")
            c.cw.put_metric_alarm(**args)
        self.physical[name] = name

    def _reapply_dropped(self):
        """moto's CloudFormation ignores a bucket's notifications, a table's TTL and a
        function's layers, and
        stores a role's inline policies in a form its own IAM checks cannot read."""
        for n, r in self.template["Resources"].items():
            p = r.get("Properties", {})
            if r["Type"] == "AWS::IAM::Role" and n in self.physical:
                for policy in self.resolve(p.get("Policies", [])):
                    self.c.iam.put_role_policy(RoleName=self.physical[n], PolicyName=policy["PolicyName"],
                                               PolicyDocument=json.dumps(policy["PolicyDocument"]))
                for arn in self.resolve(p.get("ManagedPolicyArns", [])):
                    self.c.iam.attach_role_policy(RoleName=self.physical[n], PolicyArn=arn)
            if r["Type"] == "AWS::S3::Bucket" and "NotificationConfiguration" in p:
                conf = self.resolve(p["NotificationConfiguration"])
                queues = [
                    {"QueueArn": q["Queue"], "Events": [q["Event"]],
                     **({"Filter": {"Key": {"FilterRules": q["Filter"]["S3Key"]["Rules"]}}} if "Filter" in q else {})}
                    for q in conf.get("QueueConfigurations", [])
                ]
                self.c.s3.put_bucket_notification_configuration(
                    Bucket=self.physical[n], NotificationConfiguration={"QueueConfigurations": queues})
            if r["Type"] == "AWS::Lambda::Function" and "Layers" in p:
                layers = self.resolve(p["Layers"])
                deployed = self.c.lam.get_function_configuration(FunctionName=self.physical[n]).get("Layers", [])
                if layers and [l["Arn"] for l in deployed] != layers:
                    self.c.lam.update_function_configuration(FunctionName=self.physical[n], Layers=layers)
            if r["Type"] == "AWS::DynamoDB::Table" and "TimeToLiveSpecification" in p:
                self.c.ddb.update_time_to_live(
                    TableName=self.physical[n], TimeToLiveSpecification=self.resolve(p["TimeToLiveSpecification"]))

    # -- intrinsic functions, for the properties applied through APIs ----------------------

    def arn(self, logical):
        t = self.template["Resources"][logical]["Type"]
        phys = self.physical[logical]
        if t == "AWS::SQS::Queue":
            return self.c.sqs.get_queue_attributes(QueueUrl=phys, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        if t == "AWS::Lambda::Function":
            return self.c.lam.get_function(FunctionName=phys)["Configuration"]["FunctionArn"]
        if t == "AWS::S3::Bucket":
            return f"arn:aws:s3:::{phys}"
        if t == "AWS::DynamoDB::Table":
            return self.c.ddb.describe_table(TableName=phys)["Table"]["TableArn"]
        raise KeyError(f"no ARN for {logical} ({t})")

    def ref(self, name):
        if name in self.physical:
            return self.physical[name]
        if name == "AWS::StackName":
            return self.name
        if name == "AWS::Region":
            return "us-east-1"
        if name == "AWS::Partition":
            return "aws"
        if name == "AWS::URLSuffix":
            return "amazonaws.com"
        if name == "AWS::AccountId":
            return "123456789012"
        if name == "AWS::NoValue":
            return None
        if name in self.params:
            return self.params[name]
        return self.template["Parameters"][name].get("Default", "")

    def resolve(self, v):
        if isinstance(v, list):
            return [x for x in (self.resolve(i) for i in v) if x is not None]
        if not isinstance(v, dict):
            return v
        if len(v) == 1:
            (k, a), = v.items()
            if k == "Ref":
                return self.ref(a)
            if k == "Fn::GetAtt":
                logical, attr = a if isinstance(a, list) else a.split(".", 1)
                if attr == "Arn":
                    return self.arn(logical)
                if attr == "QueueName":
                    return self.physical[logical].rsplit("/", 1)[1]
                raise KeyError(f"GetAtt {logical}.{attr}")
            if k == "Fn::Sub":
                text, extra = (a, {}) if isinstance(a, str) else (a[0], a[1])
                out = text
                import re
                for var in re.findall(r"\$\{([^}]+)\}", text):
                    if var in extra:
                        val = self.resolve(extra[var])
                    elif "." in var:
                        val = self.resolve({"Fn::GetAtt": var.split(".", 1)})
                    else:
                        val = self.ref(var)
                    out = out.replace("${" + var + "}", str(val))
                return out
            if k == "Fn::Join":
                return a[0].join(str(x) for x in self.resolve(a[1]))
            if k == "Fn::If":
                cond, yes, no = a
                holds = self._condition_holds({"Condition": cond})
                return self.resolve(yes if holds else no)
        out = {}
        for k, x in v.items():
            r = self.resolve(x)
            if r is not None:
                out[k] = r
        return out

    # -- read back -----------------------------------------------------------------------

    def functions(self):
        """Each function's deployed configuration, by logical id."""
        out = {}
        for logical, r in self.template["Resources"].items():
            if r["Type"] != "AWS::Lambda::Function" or logical not in self.physical:
                continue
            fn = self.c.lam.get_function(FunctionName=self.physical[logical])
            conf = fn["Configuration"]
            # moto's CloudFormation keeps an image function's ImageUri but reports Zip.
            if "ImageUri" in fn.get("Code", {}):
                conf["PackageType"] = "Image"
            out[logical] = conf
        return out

    def mappings(self):
        return self.c.lam.list_event_source_mappings()["EventSourceMappings"]

    def schedules(self):
        """(rule name, rate in seconds, target function ARN) of every scheduled rule."""
        out = []
        for rule in self.c.events.list_rules()["Rules"]:
            expr = rule.get("ScheduleExpression", "")
            if not expr.startswith("rate("):
                continue
            n, unit = expr[5:-1].split()
            seconds = int(n) * {"minute": 60, "minutes": 60, "hour": 3600, "hours": 3600}[unit]
            for t in self.c.events.list_targets_by_rule(Rule=rule["Name"])["Targets"]:
                out.append((rule["Name"], seconds, t["Arn"]))
        return out
