//! macOS: Seatbelt profiles (not yet written).
