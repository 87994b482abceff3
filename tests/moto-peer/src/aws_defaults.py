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
# - a route to a terminated instance is a blackhole (moto keeps it active);
# - a TCP, UDP, TCP_UDP or TLS target group has `preserve_client_ip.enabled` (true, as
#   for instance targets) and `proxy_protocol_v2.enabled` (false) among its attributes.
import sys

import moto.ec2.models.route_tables as route_tables
import moto.elb.models as elb
import moto.elbv2.models as elbv2
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


def _v2_created(self, *args, **kwargs):
    if kwargs.get("scheme") is None:
        kwargs["scheme"] = "internet-facing"
    return _create_v2(self, *args, **kwargs)


_group_created = elbv2.FakeTargetGroup.__init__


def _group_created_with_attributes(self, *args, **kwargs):
    _group_created(self, *args, **kwargs)
    if self.protocol in ("TCP", "UDP", "TCP_UDP", "TLS"):
        self.attributes.setdefault("preserve_client_ip.enabled", "true")
        self.attributes.setdefault("proxy_protocol_v2.enabled", "false")


def _route_state(self):
    instance = self.instance
    if instance is not None and getattr(instance, "state", None) == "terminated":
        return "blackhole"
    return "active"


route_tables.Route.state = property(_route_state)
elb.LoadBalancer.__init__ = _classic_created
elb.LoadBalancer.get_default_attributes = classmethod(_classic_defaults)
elb.ELBBackend.modify_load_balancer_attributes = _classic_modified
elbv2.ELBv2Backend.create_load_balancer = _v2_created
elbv2.FakeTargetGroup.__init__ = _group_created_with_attributes

if __name__ == "__main__":
    sys.argv[0] = "moto_server"
    sys.exit(main())
