//! Whether commands may run under the exec helper's confinement tier: the policy's
//! `require_namespaces` (true unless the document sets it to false). Checked before every
//! `ExecRequest::Start` (run_command, `gatehouse run`/`sandbox`, stdio MCP servers).

use crate::Ctx;
use ipc_schema::tier::ConfinementTier;
use ipc_schema::Role;

/// The tier the exec helper reported (for a command's card and audit line), if it has.
pub fn in_force(ctx: &Ctx) -> Option<ConfinementTier> {
    let slot = ctx.helpers.slot(Role::Exec)?;
    let report = slot.report();
    report.lockdown.as_ref().and_then(|l| l.exec_tier)
}

/// Why no command may start now, or `None` when the tier in force is allowed. Waits (as a call
/// would) for an exec helper that is still starting, so that its tier is known.
pub async fn refusal(ctx: &Ctx) -> Option<String> {
    let slot = ctx.helpers.slot(Role::Exec)?;
    let deadline = std::time::Instant::now() + crate::helpers::READY_WAIT;
    while !slot.is_settled() && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let lockdown = slot.report().lockdown;
    let (tier, why) = match &lockdown {
        Some(l) => (l.exec_tier, l.exec_tier_why.clone()),
        None => (None, None),
    };
    let require = match &ctx.gate.policy.borrow().current {
        Ok(p) => p.require_namespaces,
        // An invalid policy refuses every call elsewhere; here it requires the full tier.
        Err(_) => true,
    };
    match tier {
        Some(ConfinementTier::Namespaces) => None,
        Some(ConfinementTier::Landlock) if !require => None,
        Some(ConfinementTier::Landlock) => {
            let why = why
                .map(|w| format!("{}; to fix: {}", w.message, w.remedy))
                .unwrap_or_else(|| "the exec helper did not say why".into());
            Some(format!(
                "commands run only in the exec sandbox's namespace tier (policy require_namespaces, true unless set), and this machine refuses user namespaces: {why}. Or set require_namespaces = false in the policy to run commands in the Landlock tier, which does not hold what docs/SECURITY.md lists (gatehouse doctor --json names it)"
            ))
        }
        Some(t @ (ConfinementTier::RestrictedToken | ConfinementTier::Seatbelt)) if require => {
            Some(format!(
                "commands run only in the exec sandbox's namespace tier (policy require_namespaces, true unless set), and this exec helper runs them in the {t} tier of another OS. Set require_namespaces = false in the policy to run them there; it does not hold what docs/SECURITY.md lists"
            ))
        }
        Some(ConfinementTier::RestrictedToken | ConfinementTier::Seatbelt) => None,
        None if !slot.is_settled() => Some(
            "the exec helper is still starting (its confinement tier is not known yet); try again"
                .into(),
        ),
        // Refused: the call itself says why.
        None if !slot.is_ready() => None,
        // Ready without a tier: it did not lock down as the exec helper does.
        None => Some("the exec helper did not name its confinement tier".into()),
    }
}
