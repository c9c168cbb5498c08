//! `symbolize`: resolves each sample's ip and callchain to (dso, function, offset). (In progress.)

pub mod symbols;
