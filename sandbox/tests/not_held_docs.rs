//! docs/SECURITY.md names every case the namespace-free tier does not hold
//! (`not_held::WITHOUT_NAMESPACES`), so the list and the page cannot drift apart.
#![cfg(target_os = "linux")]

use sandbox::linux::command::not_held::WITHOUT_NAMESPACES;

#[test]
fn security_md_names_every_case_the_landlock_tier_does_not_hold() {
    let page = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/SECURITY.md"))
        .expect("docs/SECURITY.md");
    let section = page
        .split("### The namespace-free tier: what it does not hold")
        .nth(1)
        .expect("SECURITY.md has the namespace-free tier's section");
    let section = section.split("\n## ").next().unwrap();
    let missing: Vec<&str> = WITHOUT_NAMESPACES
        .iter()
        .map(|n| n.name)
        .filter(|n| !section.contains(&format!("`{n}`")))
        .collect();
    assert!(
        WITHOUT_NAMESPACES.len() >= 10,
        "the list shrank: {}",
        WITHOUT_NAMESPACES.len()
    );
    assert!(missing.is_empty(), "not named in SECURITY.md: {missing:?}");
}
