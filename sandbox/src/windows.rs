//! Windows: AppContainer (not yet written).
