"""Huawei Cloud's official Python SDK as an independent judge of what the host signs.

`resign`: reads {"keys": {AK: SK}, "requests": [{"method", "target", "headers": [[name,
value]], "body": base64}]} on stdin (requests as tests/huaweicloud-double received them)
and signs each again with huaweicloudsdkcore's Signer, with the request's own X-Sdk-Date
and the headers its Authorization names; prints [{"equal": bool, "host": ..., "sdk":
...}] on stdout, one per request.

`drive`: reads {"ak", "sk", "project_id", "endpoints": {"ecs", "elb", "vpc"}, "server":
name} on stdin and drives tests/huaweicloud-double with the official ECS, VPC, ELB and
EIP clients as a user's script would: finds the server by name, a subnet, creates a
shared load balancer and waits for it to be ACTIVE, finds it by name, adds a listener,
a pool and the server as a member, creates an EIP and binds it to the load balancer's
VIP port, and finds it by that port. Prints what it made (JSON). Every answer is read
into the SDK's own models, so a shape the SDK cannot read fails here.

Run with the tools venv's python (scripts/ensure-huaweicloud-sdk.sh).
"""

import base64
import json
import sys
from urllib.parse import parse_qsl, urlsplit

from huaweicloudsdkcore.auth.credentials import BasicCredentials
from huaweicloudsdkcore.sdk_request import SdkRequest
from huaweicloudsdkcore.signer.signer import Signer


def authorization_parts(value):
    """Access, SignedHeaders and Signature of an `SDK-HMAC-SHA256` Authorization."""
    algorithm, _, rest = value.partition(" ")
    assert algorithm == "SDK-HMAC-SHA256", value
    parts = dict(p.strip().split("=", 1) for p in rest.split(","))
    return parts["Access"], parts["SignedHeaders"].split(";"), parts["Signature"]


def resign(request, keys):
    headers = {name.lower(): value for name, value in request["headers"]}
    authorization = headers["authorization"]
    access, signed, _ = authorization_parts(authorization)
    target = urlsplit(request["target"])
    sdk_request = SdkRequest(
        method=request["method"],
        schema="http",
        host=headers["host"],
        resource_path=target.path,
        # As the gateway reads a query: decoded, `+` a space, empty values kept.
        query_params=parse_qsl(target.query, keep_blank_values=True),
        # Only what the host signed (the SDK signs every header it is given).
        header_params={name: headers[name] for name in signed},
        body=base64.b64decode(request["body"]),
    )
    credentials = BasicCredentials(access, keys[access])
    Signer(credentials).sign(sdk_request)
    sdk = sdk_request.header_params["Authorization"]
    return {"equal": sdk == authorization, "host": authorization, "sdk": sdk}


def drive(job):
    import time

    from huaweicloudsdkcore.http.http_config import HttpConfig
    from huaweicloudsdkecs.v2 import EcsClient, ListServersDetailsRequest, ShowServerRequest
    from huaweicloudsdkeip.v2 import (
        CreatePublicipBandwidthOption, CreatePublicipOption, CreatePublicipRequest,
        CreatePublicipRequestBody, EipClient, ListPublicipsRequest, UpdatePublicipOption,
        UpdatePublicipRequest, UpdatePublicipsRequestBody)
    from huaweicloudsdkelb.v2 import (
        CreateListenerReq, CreateListenerRequest, CreateListenerRequestBody,
        CreateLoadbalancerReq, CreateLoadbalancerRequest, CreateLoadbalancerRequestBody,
        CreateMemberReq, CreateMemberRequest, CreateMemberRequestBody, CreatePoolReq,
        CreatePoolRequest, CreatePoolRequestBody, ElbClient, ListLoadbalancersRequest,
        ShowLoadbalancerRequest)
    from huaweicloudsdkvpc.v2 import ListSubnetsRequest, VpcClient

    credentials = BasicCredentials(job["ak"], job["sk"], job["project_id"])
    config = HttpConfig.get_default_config()
    config.timeout = (5, 30)
    config.retry_times = 0

    def client(kind, service):
        return (kind.new_builder().with_http_config(config).with_credentials(credentials)
                .with_endpoints([job["endpoints"][service]]).build())

    ecs, vpc = client(EcsClient, "ecs"), client(VpcClient, "vpc")
    elb, eip = client(ElbClient, "elb"), client(EipClient, "vpc")

    servers = ecs.list_servers_details(ListServersDetailsRequest(name=job["server"], limit=10))
    named = [s for s in servers.servers if s.name == job["server"]]
    assert len(named) == 1, servers
    server = ecs.show_server(ShowServerRequest(server_id=named[0].id)).server
    address = next(a.addr for nets in server.addresses.values() for a in nets
                   if a.os_ext_ip_stype == "fixed")
    subnet = vpc.list_subnets(ListSubnetsRequest(limit=10)).subnets[0]

    created = elb.create_loadbalancer(CreateLoadbalancerRequest(
        body=CreateLoadbalancerRequestBody(loadbalancer=CreateLoadbalancerReq(
            name="sdk-lb", vip_subnet_id=subnet.neutron_subnet_id)))).loadbalancer
    statuses = [created.provisioning_status]
    for _ in range(50):
        lb = elb.show_loadbalancer(ShowLoadbalancerRequest(loadbalancer_id=created.id)).loadbalancer
        statuses.append(lb.provisioning_status)
        if lb.provisioning_status == "ACTIVE":
            break
        time.sleep(0.1)
    found = elb.list_loadbalancers(ListLoadbalancersRequest(name="sdk-lb")).loadbalancers
    assert [l.id for l in found] == [created.id], found

    listener = elb.create_listener(CreateListenerRequest(body=CreateListenerRequestBody(
        listener=CreateListenerReq(loadbalancer_id=created.id, protocol="TCP",
                                   protocol_port=80, name="sdk-listener")))).listener
    pool = elb.create_pool(CreatePoolRequest(body=CreatePoolRequestBody(pool=CreatePoolReq(
        protocol="TCP", lb_algorithm="ROUND_ROBIN", listener_id=listener.id,
        name="sdk-pool")))).pool
    member = elb.create_member(CreateMemberRequest(pool_id=pool.id, body=CreateMemberRequestBody(
        member=CreateMemberReq(address=address, protocol_port=30080,
                               subnet_id=subnet.neutron_subnet_id)))).member

    publicip = eip.create_publicip(CreatePublicipRequest(body=CreatePublicipRequestBody(
        publicip=CreatePublicipOption(type="5_bgp"),
        bandwidth=CreatePublicipBandwidthOption(name="sdk-bandwidth", share_type="PER",
                                                size=5)))).publicip
    eip.update_publicip(UpdatePublicipRequest(publicip_id=publicip.id, body=UpdatePublicipsRequestBody(
        publicip=UpdatePublicipOption(port_id=created.vip_port_id))))
    bound = eip.list_publicips(ListPublicipsRequest(port_id=[created.vip_port_id])).publicips
    assert [p.id for p in bound] == [publicip.id], bound

    return {
        "server_id": server.id,
        "member_address": member.address,
        "load_balancer_id": created.id,
        "statuses": statuses,
        "listener_id": listener.id,
        "pool_id": pool.id,
        "eip_id": publicip.id,
        "public_ip": bound[0].public_ip_address,
        "vip_port_id": created.vip_port_id,
    }


def main():
    command = sys.argv[1]
    if command == "resign":
        job = json.load(sys.stdin)
        json.dump([resign(r, job["keys"]) for r in job["requests"]], sys.stdout)
    elif command == "drive":
        json.dump(drive(json.load(sys.stdin)), sys.stdout)
    else:
        sys.exit(f"unknown command {command!r}")


if __name__ == "__main__":
    main()
