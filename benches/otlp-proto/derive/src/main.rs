#[path = "../../../../export/src/otlp/proto.rs"]
mod proto;

type Request = proto::ExportProfilesServiceRequest;

include!("../../common.rs");
