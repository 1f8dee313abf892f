//! gatehouse's Windows Filtering Platform filters, put in force: [`install`] and [`remove`]
//! (`gatehouse setup network-filters`, as an administrator) the machine-wide set that
//! [`crate::wincfg::network_filters`] generates, [`installed`] to read which of them the base
//! filtering engine holds, and [`probe_outbound`], each confined process's own try of the
//! network, since a process cannot read back a filter that applies to it.
//!
//! Everything is added in one transaction, persistent (it outlives a reboot) and keyed by the
//! set's stable GUIDs, so installing again replaces, and removal finds, exactly gatehouse's
//! objects.

use super::acl::OwnedSd;
use super::ffi::{invalid, returned, wide, WinError};
use crate::wincfg::{Guid, InstalledFilter, WfpSet};
use ipc_schema::status::OutboundProbe;
use std::ffi::c_void;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream};
use std::time::Duration;
use windows_sys::core::GUID;
use windows_sys::Win32::Foundation::{
    FWP_E_FILTER_NOT_FOUND, FWP_E_PROVIDER_NOT_FOUND, FWP_E_SUBLAYER_NOT_FOUND, HANDLE,
};
use windows_sys::Win32::NetworkManagement::WindowsFilteringPlatform as fwp;
use windows_sys::Win32::Security::GetSecurityDescriptorLength;

const MECH: &str = "WFP filters";

/// The GUID structure for `g`, read in text order.
fn guid(g: &Guid) -> GUID {
    let b = g.0;
    GUID {
        data1: u32::from_be_bytes([b[0], b[1], b[2], b[3]]),
        data2: u16::from_be_bytes([b[4], b[5]]),
        data3: u16::from_be_bytes([b[6], b[7]]),
        data4: [b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]],
    }
}

/// The layer a rendered name stands for; a name the applier does not know is refused.
fn layer(name: &str) -> Result<GUID, WinError> {
    Ok(match name {
        "FWPM_LAYER_ALE_AUTH_CONNECT_V4" => fwp::FWPM_LAYER_ALE_AUTH_CONNECT_V4,
        "FWPM_LAYER_ALE_AUTH_CONNECT_V6" => fwp::FWPM_LAYER_ALE_AUTH_CONNECT_V6,
        "FWPM_LAYER_ALE_AUTH_LISTEN_V4" => fwp::FWPM_LAYER_ALE_AUTH_LISTEN_V4,
        "FWPM_LAYER_ALE_AUTH_LISTEN_V6" => fwp::FWPM_LAYER_ALE_AUTH_LISTEN_V6,
        other => return Err(invalid(MECH, format!("unknown layer {other}"))),
    })
}

fn action(name: &str) -> Result<fwp::FWP_ACTION_TYPE, WinError> {
    match name {
        "FWP_ACTION_BLOCK" => Ok(fwp::FWP_ACTION_BLOCK),
        "FWP_ACTION_PERMIT" => Ok(fwp::FWP_ACTION_PERMIT),
        other => Err(invalid(MECH, format!("unknown action {other}"))),
    }
}

/// A session with the base filtering engine, closed when dropped.
struct Engine(HANDLE);

impl Engine {
    fn open() -> Result<Engine, WinError> {
        let mut h: HANDLE = std::ptr::null_mut();
        // SAFETY: no server name, identity or session (the local engine, the caller's
        // credentials, a default session); `h` receives the engine handle, closed by Drop.
        let rc = unsafe {
            fwp::FwpmEngineOpen0(
                std::ptr::null(),
                windows_sys::Win32::System::Rpc::RPC_C_AUTHN_WINNT,
                std::ptr::null(),
                std::ptr::null(),
                &mut h,
            )
        };
        ok("FwpmEngineOpen0", rc)?;
        Ok(Engine(h))
    }

    /// Runs `f` in one transaction: committed if it succeeds, aborted otherwise.
    fn transaction(&self, f: impl FnOnce(&Engine) -> Result<(), WinError>) -> Result<(), WinError> {
        // SAFETY: a valid engine handle; flags 0 is a read-write transaction.
        ok("FwpmTransactionBegin0", unsafe {
            fwp::FwpmTransactionBegin0(self.0, 0)
        })?;
        match f(self) {
            // SAFETY: the transaction this session began.
            Ok(()) => ok("FwpmTransactionCommit0", unsafe {
                fwp::FwpmTransactionCommit0(self.0)
            }),
            Err(e) => {
                // SAFETY: as above; the first error is the one reported.
                unsafe { fwp::FwpmTransactionAbort0(self.0) };
                Err(e)
            }
        }
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        // SAFETY: the handle FwpmEngineOpen0 gave, closed once.
        unsafe { fwp::FwpmEngineClose0(self.0) };
    }
}

fn ok(call: &'static str, rc: u32) -> Result<(), WinError> {
    if rc == 0 {
        Ok(())
    } else {
        Err(returned(MECH, call, rc))
    }
}

/// `rc`, where `absent` (the object was not there) also counts as done.
fn ok_or(call: &'static str, rc: u32, absent: i32) -> Result<(), WinError> {
    if rc == absent as u32 {
        Ok(())
    } else {
        ok(call, rc)
    }
}

/// Display data: two NUL-terminated UTF-16 strings that must outlive the call they are used in.
struct Display(Vec<u16>, Vec<u16>);

impl Display {
    fn new(name: &str, description: &str) -> Result<Display, WinError> {
        Ok(Display(
            wide(MECH, name.as_ref())?,
            wide(MECH, description.as_ref())?,
        ))
    }

    fn data(&mut self) -> fwp::FWPM_DISPLAY_DATA0 {
        fwp::FWPM_DISPLAY_DATA0 {
            name: self.0.as_mut_ptr(),
            description: self.1.as_mut_ptr(),
        }
    }
}

/// Installs `set` (replacing any earlier copy of it): the provider, the sublayer and every
/// filter, persistent, in one transaction. Needs an administrator's token.
pub fn install(set: &WfpSet) -> Result<(), WinError> {
    let engine = Engine::open()?;
    engine.transaction(|e| {
        delete_all(e, set)?;
        let mut provider_key = guid(&set.provider);
        let mut pd = Display::new(
            "gatehouse",
            "gatehouse: outbound network refused to its confined helpers and commands",
        )?;
        let provider = fwp::FWPM_PROVIDER0 {
            providerKey: provider_key,
            displayData: pd.data(),
            flags: fwp::FWPM_PROVIDER_FLAG_PERSISTENT,
            ..Default::default()
        };
        // SAFETY: `provider` and the strings it points to live across the call; no descriptor.
        ok("FwpmProviderAdd0", unsafe {
            fwp::FwpmProviderAdd0(e.0, &provider, std::ptr::null_mut())
        })?;
        let mut sd = Display::new("gatehouse", "gatehouse's filters")?;
        let sublayer = fwp::FWPM_SUBLAYER0 {
            subLayerKey: guid(&set.sublayer),
            displayData: sd.data(),
            flags: fwp::FWPM_SUBLAYER_FLAG_PERSISTENT,
            providerKey: &mut provider_key,
            weight: set.sublayer_weight,
            ..Default::default()
        };
        // SAFETY: as above; `providerKey` points at `provider_key`, alive across the call.
        ok("FwpmSubLayerAdd0", unsafe {
            fwp::FwpmSubLayerAdd0(e.0, &sublayer, std::ptr::null_mut())
        })?;
        for f in &set.filters {
            add_filter(e, set, f, &mut provider_key)?;
        }
        Ok(())
    })
}

fn add_filter(
    e: &Engine,
    set: &WfpSet,
    f: &InstalledFilter,
    provider_key: &mut GUID,
) -> Result<(), WinError> {
    let sd = OwnedSd::from_sddl(&f.user_sddl)?;
    // SAFETY: a valid self-relative descriptor (ConvertStringSecurityDescriptorToSecurityDescriptorW
    // makes them so), alive while `sd` is.
    let len = unsafe { GetSecurityDescriptorLength(sd.as_ptr()) };
    let mut blob = fwp::FWP_BYTE_BLOB {
        size: len,
        data: sd.as_ptr().cast::<u8>(),
    };
    let mut conditions = vec![fwp::FWPM_FILTER_CONDITION0 {
        fieldKey: fwp::FWPM_CONDITION_ALE_USER_ID,
        matchType: fwp::FWP_MATCH_EQUAL,
        conditionValue: fwp::FWP_CONDITION_VALUE0 {
            r#type: fwp::FWP_SECURITY_DESCRIPTOR_TYPE,
            Anonymous: fwp::FWP_CONDITION_VALUE0_0 { sd: &mut blob },
        },
    }];
    let port = |p: u16| fwp::FWP_VALUE0 {
        r#type: fwp::FWP_UINT16,
        Anonymous: fwp::FWP_VALUE0_0 { uint16: p },
    };
    let mut ports = f.loopback_ports.map(|(lo, hi)| fwp::FWP_RANGE0 {
        valueLow: port(lo),
        valueHigh: port(hi),
    });
    if let Some(range) = ports.as_mut() {
        conditions.push(fwp::FWPM_FILTER_CONDITION0 {
            fieldKey: fwp::FWPM_CONDITION_IP_REMOTE_ADDRESS,
            matchType: fwp::FWP_MATCH_EQUAL,
            conditionValue: fwp::FWP_CONDITION_VALUE0 {
                // An IPv4 address condition is a UINT32 in host order.
                r#type: fwp::FWP_UINT32,
                Anonymous: fwp::FWP_CONDITION_VALUE0_0 {
                    uint32: u32::from(Ipv4Addr::LOCALHOST),
                },
            },
        });
        conditions.push(fwp::FWPM_FILTER_CONDITION0 {
            fieldKey: fwp::FWPM_CONDITION_IP_REMOTE_PORT,
            matchType: fwp::FWP_MATCH_RANGE,
            conditionValue: fwp::FWP_CONDITION_VALUE0 {
                r#type: fwp::FWP_RANGE_TYPE,
                Anonymous: fwp::FWP_CONDITION_VALUE0_0 { rangeValue: range },
            },
        });
    }
    let mut display = Display::new(&format!("gatehouse: {}", f.name), &f.user_sddl)?;
    let mut flags = fwp::FWPM_FILTER_FLAG_PERSISTENT;
    if f.hard {
        flags |= fwp::FWPM_FILTER_FLAG_CLEAR_ACTION_RIGHT;
    }
    let filter = fwp::FWPM_FILTER0 {
        filterKey: guid(&f.key),
        displayData: display.data(),
        flags,
        providerKey: provider_key,
        layerKey: layer(f.layer)?,
        subLayerKey: guid(&set.sublayer),
        weight: fwp::FWP_VALUE0 {
            r#type: fwp::FWP_UINT8,
            Anonymous: fwp::FWP_VALUE0_0 { uint8: f.weight },
        },
        numFilterConditions: conditions.len() as u32,
        filterCondition: conditions.as_mut_ptr(),
        action: fwp::FWPM_ACTION0 {
            r#type: action(f.action)?,
            ..Default::default()
        },
        ..Default::default()
    };
    let mut id = 0u64;
    // SAFETY: `filter` and everything it points to (the conditions, the blob, the port range,
    // the descriptor `sd`, the display strings, the provider key) live across the call.
    ok("FwpmFilterAdd0", unsafe {
        fwp::FwpmFilterAdd0(e.0, &filter, std::ptr::null_mut(), &mut id)
    })
}

/// Deletes the set's filters, sublayer and provider, each absent one counting as deleted.
fn delete_all(e: &Engine, set: &WfpSet) -> Result<(), WinError> {
    for f in &set.filters {
        // SAFETY: a valid engine handle and a key that lives across the call.
        let rc = unsafe { fwp::FwpmFilterDeleteByKey0(e.0, &guid(&f.key)) };
        ok_or("FwpmFilterDeleteByKey0", rc, FWP_E_FILTER_NOT_FOUND)?;
    }
    // SAFETY: as above.
    let rc = unsafe { fwp::FwpmSubLayerDeleteByKey0(e.0, &guid(&set.sublayer)) };
    ok_or("FwpmSubLayerDeleteByKey0", rc, FWP_E_SUBLAYER_NOT_FOUND)?;
    // SAFETY: as above.
    let rc = unsafe { fwp::FwpmProviderDeleteByKey0(e.0, &guid(&set.provider)) };
    ok_or("FwpmProviderDeleteByKey0", rc, FWP_E_PROVIDER_NOT_FOUND)
}

/// Removes every object of `set` from the machine (what is not there is skipped).
pub fn remove(set: &WfpSet) -> Result<(), WinError> {
    let engine = Engine::open()?;
    engine.transaction(|e| delete_all(e, set))
}

/// Which of the set's filters the engine holds, by name: `(name, present)`.
pub fn installed(set: &WfpSet) -> Result<Vec<(String, bool)>, WinError> {
    let engine = Engine::open()?;
    let mut out = Vec::new();
    for f in &set.filters {
        let mut found: *mut fwp::FWPM_FILTER0 = std::ptr::null_mut();
        // SAFETY: a valid engine handle and key; `found` receives engine-allocated memory,
        // freed with FwpmFreeMemory0 below.
        let rc = unsafe { fwp::FwpmFilterGetByKey0(engine.0, &guid(&f.key), &mut found) };
        if !found.is_null() {
            let mut p = found.cast::<c_void>();
            // SAFETY: memory the engine allocated for this call, freed once.
            unsafe { fwp::FwpmFreeMemory0(&mut p) };
        }
        match rc {
            0 => out.push((f.name.clone(), true)),
            rc if rc == FWP_E_FILTER_NOT_FOUND as u32 => out.push((f.name.clone(), false)),
            rc => return Err(returned(MECH, "FwpmFilterGetByKey0", rc)),
        }
    }
    Ok(out)
}

/// WSAEACCES: what a socket call returns when a WFP filter blocks it.
const WSAEACCES: i32 = 10013;
/// WSAEAFNOSUPPORT and WSAEADDRNOTAVAIL: the family is not there at all (no IPv6 stack).
const FAMILY_ABSENT: [i32; 2] = [10047, 10049];

/// One try of [`loopback_tries`]: what was tried and how it went, and whether it was refused
/// as a WFP block refuses (WSAEACCES).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoopbackTry {
    pub what: String,
    pub refused: bool,
}

/// The process tries to listen and to connect on the loopback, IPv4 and IPv6 (a family the
/// machine lacks is skipped). A listener of its own is the target where listening is allowed,
/// so neither outcome waits for a timeout.
pub fn loopback_tries() -> Vec<LoopbackTry> {
    let mut tries = Vec::new();
    let mut note = |what: String, refused: bool| tries.push(LoopbackTry { what, refused });
    for (family, ip) in [
        ("IPv4", IpAddr::V4(Ipv4Addr::LOCALHOST)),
        ("IPv6", IpAddr::V6(Ipv6Addr::LOCALHOST)),
    ] {
        // The listener is kept until the connect below is done: it is the target.
        let listener = TcpListener::bind((ip, 0));
        let target = match listener.as_ref().map(TcpListener::local_addr) {
            Ok(Ok(a)) => {
                note(format!("{family} listen allowed"), false);
                a
            }
            Ok(Err(e)) => {
                note(format!("{family} listener has no address ({e})"), false);
                continue;
            }
            Err(e) if e.raw_os_error() == Some(WSAEACCES) => {
                note(format!("{family} listen refused"), true);
                SocketAddr::new(ip, 9)
            }
            Err(e)
                if family == "IPv6" && FAMILY_ABSENT.contains(&e.raw_os_error().unwrap_or(0)) =>
            {
                continue
            }
            Err(e) => {
                note(format!("{family} listen failed otherwise ({e})"), false);
                SocketAddr::new(ip, 9)
            }
        };
        match TcpStream::connect_timeout(&target, Duration::from_secs(2)) {
            Err(e) if e.raw_os_error() == Some(WSAEACCES) => {
                note(format!("{family} connect refused"), true)
            }
            Ok(_) => note(format!("{family} connect allowed"), false),
            Err(e) => note(format!("{family} connect not refused ({e})"), false),
        }
        drop(listener);
    }
    tries
}

/// A confined process's report of [`loopback_tries`]: refused only if every try was.
pub fn probe_outbound() -> OutboundProbe {
    let open: Vec<String> = loopback_tries()
        .into_iter()
        .filter(|t| !t.refused)
        .map(|t| t.what)
        .collect();
    if open.is_empty() {
        OutboundProbe::Refused
    } else {
        OutboundProbe::NotRefused(open.join(", "))
    }
}
