//! The ELB's elastic IP (EIP v2's `/v1/{project_id}/publicips`, on the VPC endpoint):
//! upstream's `createOrAssociateEIP`, `createEIP` and `unbindEIP`.
//!
//! - `kubernetes.io/elb.eip-id` binds that EIP to the ELB's VIP port (unbinding another
//!   one bound there, as upstream); on delete it is unbound and kept (upstream
//!   releases it unless `keep-eip`: it is the user's, not made here).
//! - `kubernetes.io/elb.eip-auto-create-option` creates one when the ELB has none,
//!   bound in the same request (`publicip.port_id`; upstream creates then binds, which
//!   can leave an unbound EIP behind); on delete it is released unless
//!   `kubernetes.io/elb.keep-eip` (then only unbound).
//!
//! The Service's address is the bound EIP's, else the VIP.

use serde_json::{Value, json};
use wasm_ccm_guest::types::{CloudError, Service};
use wasm_ccm_guest::{cloud_error, events, log};

use super::annotations::{EIP_ID, EipOptions, Settings};
use super::cloud::{Cloud, Endpoint, VPC, encode, text};
use super::{fail_for, names, wait};

/// An EIP bound to the VIP port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Bound {
    pub id: String,
    pub address: String,
}

/// The EIPs bound to the ELB's VIP port: the ELB's own `publicips` when its answer
/// has them (upstream's `Show`), else upstream's `List` by `port_id`.
pub(super) fn bound(cloud: &Cloud, lb: &Value) -> Result<Vec<Bound>, CloudError> {
    if let Some(ips) = lb["publicips"].as_array() {
        return Ok(ips
            .iter()
            .map(|ip| Bound {
                id: text(ip, "publicip_id").to_owned(),
                address: text(ip, "publicip_address").to_owned(),
            })
            .filter(|b| !b.id.is_empty())
            .collect());
    }
    let port = text(lb, "vip_port_id");
    if port.is_empty() {
        return Ok(Vec::new());
    }
    let ips = cloud.list(
        Endpoint::Vpc,
        &format!("{VPC}/publicips?port_id={}", encode(port)),
        "publicips",
        "list the EIPs of the ELB's VIP port",
    )?;
    Ok(ips
        .iter()
        // The filter is the API's; checked again, in case it is ignored.
        .filter(|ip| text(ip, "port_id") == port)
        .map(|ip| Bound {
            id: text(ip, "id").to_owned(),
            address: text(ip, "public_ip_address").to_owned(),
        })
        .collect())
}

fn path(id: &str) -> String {
    format!("{VPC}/publicips/{}", encode(id))
}

fn show(cloud: &Cloud, id: &str) -> Result<Option<Value>, CloudError> {
    let found = cloud.find(Endpoint::Vpc, &path(id), "get the EIP")?;
    Ok(found.map(|body| body["publicip"].clone()))
}

/// Upstream's `EIpClient.Bind` / `Unbind`: the EIP's `port_id` set (or emptied).
fn set_port(cloud: &Cloud, id: &str, port: &str) -> Result<(), CloudError> {
    let what = if port.is_empty() {
        format!("unbind EIP {id}")
    } else {
        format!("bind EIP {id} to port {port}")
    };
    cloud.put(
        Endpoint::Vpc,
        &path(id),
        &json!({"publicip": {"port_id": port}}),
        &what,
    )?;
    Ok(())
}

/// Upstream's `createOrAssociateEIP` for an ELB made here: the address the Service
/// gets, `None` for the VIP's.
pub(super) fn ensure(
    cloud: &Cloud,
    lb: &Value,
    service: &Service,
    settings: &Settings,
) -> Result<Option<String>, CloudError> {
    let bound = bound(cloud, lb)?;
    let Some(wanted) = &settings.eip_id else {
        // An EIP bound already (made by an earlier call or by hand) serves.
        if let Some(first) = bound.first() {
            return Ok(Some(first.address.clone()));
        }
        return match &settings.eip_auto_create {
            Some(options) => create(cloud, lb, service, options).map(Some),
            None => Ok(None),
        };
    };
    if let Some(same) = bound.iter().find(|b| &b.id == wanted) {
        return Ok(Some(same.address.clone()));
    }
    let vip_port = text(lb, "vip_port_id");
    // The named EIP is checked before anything is unbound.
    let Some(eip) = show(cloud, wanted)? else {
        return Err(fail_for(
            service,
            &format!("EIP {wanted} named by {EIP_ID} does not exist"),
        ));
    };
    let port = text(&eip, "port_id");
    if !port.is_empty() && port != vip_port {
        return Err(fail_for(
            service,
            &format!(
                "EIP {wanted} named by {EIP_ID} is bound to another port ({port}); unbind it first"
            ),
        ));
    }
    for other in &bound {
        set_port(cloud, &other.id, "")?;
        let _ = events::warning(
            "ELBEIPReplaced",
            &format!(
                "EIP {} ({}) unbound from the ELB for EIP {wanted} named by {EIP_ID}; it is kept",
                other.id, other.address
            ),
            None,
        );
    }
    if port.is_empty() {
        set_port(cloud, wanted, vip_port)?;
    }
    address(cloud, wanted, &eip)
}

/// The EIP's public address (upstream's `getEipAddress`), read again when the answer
/// in hand has none yet.
fn address(cloud: &Cloud, id: &str, eip: &Value) -> Result<Option<String>, CloudError> {
    let mut address = text(eip, "public_ip_address").to_owned();
    if address.is_empty() {
        address = show(cloud, id)?
            .map(|e| text(&e, "public_ip_address").to_owned())
            .unwrap_or_default();
    }
    if address.is_empty() {
        return Err(cloud_error::retry_after(
            wait::BUSY_RETRY_MS,
            format!("EIP {id} has no address yet"),
        ));
    }
    Ok(Some(address))
}

/// Upstream's `createEIP`: the bandwidth named `<namespace>_<name>`, the options of
/// `kubernetes.io/elb.eip-auto-create-option`; bound to the VIP port at once.
fn create(
    cloud: &Cloud,
    lb: &Value,
    service: &Service,
    options: &EipOptions,
) -> Result<String, CloudError> {
    let mut bandwidth = json!({
        "name": names::bandwidth(service),
        "share_type": options.share_type,
        "charge_mode": options.charge_mode,
    });
    if options.bandwidth_size > 0 {
        bandwidth["size"] = json!(options.bandwidth_size);
    }
    if !options.share_id.is_empty() {
        bandwidth["id"] = json!(options.share_id);
    }
    let mut publicip = json!({ "port_id": text(lb, "vip_port_id") });
    if !options.ip_type.is_empty() {
        publicip["type"] = json!(options.ip_type);
    }
    let created = cloud.post(
        Endpoint::Vpc,
        &format!("{VPC}/publicips"),
        &json!({"publicip": publicip, "bandwidth": bandwidth}),
        "create the ELB's EIP",
    )?;
    let eip = &created["publicip"];
    let id = text(eip, "id").to_owned();
    log::info(
        "created an EIP for the ELB",
        &[("eip", &id), ("elb", text(lb, "id"))],
    );
    address(cloud, &id, eip).map(Option::unwrap_or_default)
}

/// Upstream's `unbindEIP` at an ELB's deletion: every EIP on the VIP port is unbound;
/// released unless `keep-eip`, or it is the one `kubernetes.io/elb.eip-id` names.
/// When a release fails the EIP is bound again, so the next call finds it (an unbound
/// EIP is found by nothing).
pub(super) fn release(cloud: &Cloud, lb: &Value, settings: &Settings) -> Result<(), CloudError> {
    let vip_port = text(lb, "vip_port_id");
    for eip in bound(cloud, lb)? {
        set_port(cloud, &eip.id, "")?;
        if settings.keep_eip || settings.eip_id.as_deref() == Some(eip.id.as_str()) {
            log::info("kept the ELB's EIP (unbound)", &[("eip", &eip.id)]);
            continue;
        }
        if let Err(error) = cloud.delete(Endpoint::Vpc, &path(&eip.id), "release the ELB's EIP") {
            if let Err(again) = set_port(cloud, &eip.id, vip_port) {
                let _ = events::warning(
                    "ELBEIPNotReleased",
                    &format!(
                        "EIP {} ({}) was unbound from the ELB but not released ({error:?}), \
                         nor bound again ({again:?}): release it by hand",
                        eip.id, eip.address
                    ),
                    None,
                );
            }
            return Err(error);
        }
        log::info("released the ELB's EIP", &[("eip", &eip.id)]);
    }
    Ok(())
}
