type Request =
    opentelemetry_proto::tonic::collector::profiles::v1development::ExportProfilesServiceRequest;

include!("../../common.rs");
