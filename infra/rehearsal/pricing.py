"""What the load rehearsal's counts cost on AWS: the prices, and the constants of the model
(`LoadRehearsal.lambda_modelled`) that turns the CPU seconds and requests measured here
into the GB-seconds Lambda would bill."""

# Prices, us-east-1, on demand (the AWS pricing pages, 2026): Lambda x86_64 per GB-s and
# per request; DynamoDB on-demand per write and read request unit; S3 Standard per
# request (PUT/COPY/POST/LIST, GET and the rest; DELETE is free) and per GB-month; SQS
# standard per request (64 KB chunks); Batch bills the EC2 instance (g4dn.xlarge).
USD = {
    "lambda_gb_s": 0.0000166667, "lambda_request": 0.20e-6,
    "ddb_write_unit": 0.625e-6, "ddb_read_unit": 0.125e-6,
    "s3_put": 0.005e-3, "s3_get": 0.0004e-3, "s3_gb_month": 0.023,
    "sqs_request": 0.40e-6, "batch_gpu_hour": 0.526,
}
# The Lambda model (`lambda_modelled`): Lambda gives a function one vCPU at 1,769 MB (the
# Lambda developer guide, "memory and computing power"), and AWS's own latency for one
# request from a function in the same region, taken as typical figures (DynamoDB answers
# in single-digit milliseconds; a small S3 object's first byte in tens), each request
# assumed to wait alone (an upper bound: the functions overlap many of them).
LAMBDA_MB_PER_VCPU = 1769
AWS_LATENCY_S = {"dynamodb": 0.008, "s3": 0.030, "sqs": 0.010}
S3_PUT_CLASS = {"PutObject", "CopyObject", "PostObject", "ListObjectsV2", "ListBucket", "UploadPart",
                "CreateMultipartUpload", "CompleteMultipartUpload", "PutBucket"}
S3_FREE = {"DeleteObject", "DeleteObjects"}
