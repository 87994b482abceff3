# moto's server, with what AWS does and moto does not where a controller depends on it
# (each as AWS documents it):
# - a Classic Load Balancer is created with AWS's default health check (TCP on its first
#   listener's instance port, every 30 s, timeout 5 s, unhealthy after 2, healthy after
#   10); moto creates none, and DescribeLoadBalancers then has no HealthCheck, which
#   cloud-provider-aws dereferences;
# - a Classic Load Balancer's attributes start as AWS's: connection draining off with a
#   300 s timeout, desync mitigation `defensive`; ModifyLoadBalancerAttributes sets the
#   additional attributes it names (moto appends a `defensive` entry on each call);
# - a load balancer created without a Scheme is internet-facing (moto stores none);
# - a Network Load Balancer's DNS name is `<name>-<id>.elb.<region>.amazonaws.com`
#   (moto gives it a Classic one, `<name>-1.<region>.elb.amazonaws.com`, which
#   cloud-provider-aws takes for a Classic load balancer's and refuses to sync);
# - a target group lists the load balancers whose listeners forward to it after a
#   listener is changed or deleted too (moto updates the list only on create);
# - a route to a terminated instance is a blackhole (moto keeps it active);
# - a rule from another security group is the same rule whatever its description (moto
#   compares descriptions too): authorizing it again with another description is
#   InvalidPermission.Duplicate, and UpdateSecurityGroupRuleDescriptionsIngress and
#   RevokeSecurityGroupIngress find it by its protocol, ports and group;
# - a TCP, UDP, TCP_UDP or TLS target group has `preserve_client_ip.enabled` (true, as
#   for instance targets) and `proxy_protocol_v2.enabled` (false) among its attributes;
# - (a test's knob, not AWS) `POST /moto-peer/latency` with "LOW HIGH" in seconds answers
#   every later API request after a delay spread over that range, once its work is
#   done (a slow cloud whose answer a client that stops waiting never reads); "0 0"
#   turns it off;
# - (a test's knob, not AWS) `GET /moto-peer/requests` answers the API requests served
#   so far, as JSON `{"<access key ID> <Action>": count}` (the key from the signature's
#   credential scope, `-` when unsigned; the action from the query, the form body or
#   `X-Amz-Target`); moto's own API is not counted;
# - DescribeInstanceTopology (moto answers 500): every instance asked for, with three
#   network nodes (`nn-` and 17 hex digits, the top layer first) when it is running
#   and of a type EC2 gives a topology for, none otherwise. The two upper layers are
#   the zone's, the lowest the instance's own.
import collections
import fnmatch
import hashlib
import io
import itertools
import json
import re
import sys
import threading
import time
import urllib.parse

import moto.ec2.models.route_tables as route_tables
import moto.ec2.models.security_groups as security_groups
import moto.elb.models as elb
import moto.elbv2.models as elbv2
from moto.core.responses import ActionResult
from moto.ec2.responses.instances import InstanceResponse
from moto.moto_server.werkzeug_app import DomainDispatcherApplication
from moto.server import main

_created = elb.LoadBalancer.__init__


def _classic_created(self, *args, **kwargs):
    _created(self, *args, **kwargs)
    if self.health_check is None and self.listeners:
        self.health_check = elb.FakeHealthCheck(
            timeout="5",
            healthy_threshold="10",
            unhealthy_threshold="2",
            interval="30",
            target=f"TCP:{self.listeners[0].instance_port}",
        )


_defaults = elb.LoadBalancer.get_default_attributes.__func__


def _classic_defaults(cls):
    attributes = _defaults(cls)
    attributes["connection_draining"] = {"enabled": False, "timeout": 300}
    attributes["additional_attributes"] = [("elb.http.desyncmitigationmode", "defensive")]
    return attributes


_modify = elb.ELBBackend.modify_load_balancer_attributes


def _classic_modified(self, load_balancer_name, *args, additional_attributes=None, **kwargs):
    load_balancer = self.get_load_balancer(load_balancer_name)
    before = dict(load_balancer.attributes["additional_attributes"])
    _modify(self, load_balancer_name, *args, additional_attributes=None, **kwargs)
    for attribute in additional_attributes or []:
        before[attribute["Key"]] = attribute["Value"]
    load_balancer.attributes["additional_attributes"] = list(before.items())


_create_v2 = elbv2.ELBv2Backend.create_load_balancer


def _v2_created(self, name, *args, **kwargs):
    if kwargs.get("scheme") is None:
        kwargs["scheme"] = "internet-facing"
    balancer = _create_v2(self, name, *args, **kwargs)
    if balancer.type == "network":
        balancer_id = balancer.arn.rsplit("/", 1)[-1]
        balancer.dns_name = f"{name}-{balancer_id}.elb.{self.region_name}.amazonaws.com"
    return balancer


def _sync_target_group_balancers(backend, balancer_arn):
    balancer = backend.load_balancers.get(balancer_arn)
    forwarded = set()
    for listener in balancer.listeners.values() if balancer else []:
        for action in listener.default_actions:
            if action.type == "forward":
                forwarded.update(backend._get_target_group_arns_from(action_data=action.data))
    for group in backend.target_groups.values():
        listed = balancer_arn in group.load_balancer_arns
        if group.arn in forwarded and not listed:
            group.load_balancer_arns.append(balancer_arn)
        elif group.arn not in forwarded and listed:
            group.load_balancer_arns.remove(balancer_arn)


_modify_listener = elbv2.ELBv2Backend.modify_listener
_delete_listener = elbv2.ELBv2Backend.delete_listener


def _listener_modified(self, arn, *args, **kwargs):
    listener = _modify_listener(self, arn, *args, **kwargs)
    _sync_target_group_balancers(self, listener.load_balancer_arn)
    return listener


def _listener_deleted(self, listener_arn):
    listener = _delete_listener(self, listener_arn)
    _sync_target_group_balancers(self, listener.load_balancer_arn)
    return listener


_group_created = elbv2.FakeTargetGroup.__init__


def _group_created_with_attributes(self, *args, **kwargs):
    _group_created(self, *args, **kwargs)
    if self.protocol in ("TCP", "UDP", "TCP_UDP", "TLS"):
        self.attributes.setdefault("preserve_client_ip.enabled", "true")
        self.attributes.setdefault("proxy_protocol_v2.enabled", "false")


def _group_pair(rule):
    return {k: v for k, v in rule.source_group.items() if k != "Description"}


_rule_eq = security_groups.SecurityGroupRule.__eq__


def _same_rule(self, other):
    # moto's SecurityGroupRule.__eq__, with a rule from another group compared without
    # its description, as EC2 tells such rules apart; other rules as moto compares them.
    if not self.source_group or not getattr(other, "source_group", None):
        return _rule_eq(self, other)
    if self.ip_protocol != other.ip_protocol:
        return False
    for key in ("CidrIp", "CidrIpv6"):
        if key in self.ip_range and self.ip_range.get(key) != other.ip_range.get(key):
            return False
    if _group_pair(self) != _group_pair(other):
        return False
    if self.prefix_list_id != other.prefix_list_id:
        return False
    if self.ip_protocol != "-1" and (self.from_port, self.to_port) != (
        other.from_port,
        other.to_port,
    ):
        return False
    return True


def _route_state(self):
    instance = self.instance
    if instance is not None and getattr(instance, "state", None) == "terminated":
        return "blackhole"
    return "active"


# The families EC2 documents instance topology for.
_TOPOLOGY_FAMILIES = (
    "hpc6a", "hpc6id", "hpc7a", "hpc7g", "p3dn", "p4d", "p4de", "p5", "p5e", "p5en",
    "p6-b200", "trn1", "trn1n", "trn2", "trn2u",
)


def _network_node(*parts):
    return "nn-" + hashlib.sha256("/".join(parts).encode()).hexdigest()[:17]


def _describe_instance_topology(self):
    ids = self._get_param("InstanceIds", [])
    groups = self._get_param("GroupNames", [])
    filters = self._filters_from_querystring()
    zone_ids = {z.name: z.zone_id for z in self.ec2_backend.describe_availability_zones()}
    listed = []
    for instance in self.ec2_backend.all_instances():
        zone = instance.availability_zone or ""
        group = getattr(instance.placement, "group_name", None) or ""
        if ids and instance.id not in ids:
            continue
        if groups and group not in groups:
            continue
        wanted = {
            "availability-zone": zone,
            "zone-id": zone_ids.get(zone, ""),
            "instance-type": instance.instance_type,
        }
        if any(
            not any(fnmatch.fnmatchcase(wanted.get(name, ""), v) for v in values)
            for name, values in filters.items()
        ):
            continue
        family = instance.instance_type.split(".")[0]
        nodes = []
        if family in _TOPOLOGY_FAMILIES and instance.state == "running":
            nodes = [
                _network_node(zone, "1"),
                _network_node(zone, "2"),
                _network_node(instance.id),
            ]
        listed.append(
            {
                "InstanceId": instance.id,
                "InstanceType": instance.instance_type,
                "GroupName": group,
                "NetworkNodes": nodes,
                "AvailabilityZone": zone,
                "ZoneId": zone_ids.get(zone, ""),
            }
        )
    return ActionResult({"Instances": listed})


route_tables.Route.state = property(_route_state)
security_groups.SecurityGroupRule.__eq__ = _same_rule
InstanceResponse.describe_instance_topology = _describe_instance_topology
elb.LoadBalancer.__init__ = _classic_created
elb.LoadBalancer.get_default_attributes = classmethod(_classic_defaults)
elb.ELBBackend.modify_load_balancer_attributes = _classic_modified
elbv2.ELBv2Backend.create_load_balancer = _v2_created
elbv2.ELBv2Backend.modify_listener = _listener_modified
elbv2.ELBv2Backend.delete_listener = _listener_deleted
elbv2.FakeTargetGroup.__init__ = _group_created_with_attributes

_latency = [0.0, 0.0]
_answered = itertools.count(1)
_dispatch = DomainDispatcherApplication.__call__


_requests = collections.Counter()
_requests_lock = threading.Lock()


def _count(environ):
    """Counts an API request by access key and action; leaves its body readable."""
    action = environ.get("HTTP_X_AMZ_TARGET", "").rsplit(".", 1)[-1]
    if not action:
        query = urllib.parse.parse_qs(environ.get("QUERY_STRING", ""))
        action = (query.get("Action") or [""])[0]
    size = int(environ.get("CONTENT_LENGTH") or 0)
    # A body of known length only (a chunked one is left alone, counted without its
    # action).
    if not action and size > 0 and "form-urlencoded" in environ.get("CONTENT_TYPE", ""):
        body = environ["wsgi.input"].read(size)
        environ["wsgi.input"] = io.BytesIO(body)
        form = urllib.parse.parse_qs(body.decode(errors="replace"))
        action = (form.get("Action") or [""])[0]
    key = re.search(r"Credential=([^/,\s]+)/", environ.get("HTTP_AUTHORIZATION", ""))
    with _requests_lock:
        _requests[f"{key.group(1) if key else '-'} {action or '-'}"] += 1


def _slow_dispatch(self, environ, start_response):
    path = environ.get("PATH_INFO", "")
    if path == "/moto-peer/requests":
        with _requests_lock:
            body = json.dumps(dict(_requests)).encode()
        start_response("200 OK", [("Content-Type", "application/json")])
        return [body]
    if not path.startswith(("/moto-api", "/moto-peer")):
        _count(environ)
    if environ.get("PATH_INFO") == "/moto-peer/latency":
        size = int(environ.get("CONTENT_LENGTH") or 0)
        low, high = environ["wsgi.input"].read(size).decode().split()
        _latency[:] = [float(low), float(high)]
        start_response("204 No Content", [])
        return [b""]
    answer = _dispatch(self, environ, start_response)
    low, high = _latency
    if high > 0 and not environ.get("PATH_INFO", "").startswith("/moto-api"):
        spread = (next(_answered) * 7919) % 1000 / 1000
        time.sleep(low + (high - low) * spread)
    return answer


DomainDispatcherApplication.__call__ = _slow_dispatch

if __name__ == "__main__":
    sys.argv[0] = "moto_server"
    sys.exit(main())
