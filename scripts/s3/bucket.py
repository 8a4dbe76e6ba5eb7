"""Creates an S3 bucket (if missing) with one SigV4-signed PUT, standard library only, so
scripts/s3.sh needs no S3 client. usage: bucket.py ENDPOINT BUCKET (credentials from
AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, region from AWS_REGION, default us-east-1)."""

import datetime
import hashlib
import hmac
import os
import sys
import urllib.error
import urllib.parse
import urllib.request


def sign(key, msg):
    return hmac.new(key, msg.encode(), hashlib.sha256).digest()


def main():
    endpoint, bucket = sys.argv[1].rstrip("/"), sys.argv[2]
    access, secret = os.environ["AWS_ACCESS_KEY_ID"], os.environ["AWS_SECRET_ACCESS_KEY"]
    region = os.environ.get("AWS_REGION", "us-east-1")
    host = urllib.parse.urlparse(endpoint).netloc
    now = datetime.datetime.now(datetime.timezone.utc)
    amz_date, day = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
    payload = hashlib.sha256(b"").hexdigest()
    headers = {"host": host, "x-amz-content-sha256": payload, "x-amz-date": amz_date}
    signed = ";".join(sorted(headers))
    canonical = "\n".join(
        ["PUT", f"/{bucket}", ""]
        + [f"{k}:{headers[k]}" for k in sorted(headers)]
        + ["", signed, payload]
    )
    scope = f"{day}/{region}/s3/aws4_request"
    to_sign = "\n".join(
        ["AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest()]
    )
    key = sign(sign(sign(sign(("AWS4" + secret).encode(), day), region), "s3"), "aws4_request")
    signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    headers["authorization"] = (
        f"AWS4-HMAC-SHA256 Credential={access}/{scope}, SignedHeaders={signed}, Signature={signature}"
    )
    request = urllib.request.Request(f"{endpoint}/{bucket}", method="PUT", headers=headers)
    try:
        urllib.request.urlopen(request, timeout=30)
    except urllib.error.HTTPError as e:
        body = e.read().decode(errors="replace")
        if e.code == 409 and "BucketAlreadyOwnedByYou" in body:
            return
        sys.exit(f"bucket.py: creating bucket {bucket}: HTTP {e.code}: {body}")


main()
