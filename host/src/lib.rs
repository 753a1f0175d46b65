//! toolcage
