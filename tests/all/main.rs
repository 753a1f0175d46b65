//! toolcage's integration tests: one binary, split by topic. Every guest they
//! run is built from source by this crate's build script.

mod agent;
mod calls;
mod capabilities;
mod cli;
mod clients;
mod code_mode;
mod docs;
mod file_attacks;
mod filesystem;
mod limits;
mod loading;
mod nested;
mod network;
mod new;
mod oci;
mod one_path;
mod pool;
mod reload;
mod script_guests;
mod secrets;
mod settings;
mod shape;
mod shared_state;
mod stress;
mod telemetry;
mod toolset;
mod upstream;
