//! The container API's request router: every byte of a request comes from code inside a
//! container, which berth treats as hostile.
#![no_main]

use berth_core::api::ErrorKind;
use berth_core::container_api::{parse, Op, MAX_BODY};
use berth_core::http::parse_complete;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // As the server does: a complete request, then the router.
    let Ok(Some(req)) = parse_complete(data) else {
        return;
    };
    match parse(&req) {
        // Only these answers: a refusal is always a 4xx the table knows.
        Err(r) => {
            assert!((400..500).contains(&r.kind.status()), "{r:?}");
            assert!(ErrorKind::from_code(r.kind.code()).is_some());
            assert!(!r.message.is_empty());
        }
        Ok(op) => {
            assert!(req.body.len() <= MAX_BODY);
            // Nothing a request says names another container: the ids of schedules are
            // plain tokens, never paths.
            if let Op::DeleteSchedule(id) = &op {
                assert!(berth_core::schedule::check_id(id));
            }
            if let Op::Health { message: Some(m), .. } = &op {
                assert!(m.len() <= berth_core::container_api::MAX_MESSAGE);
                assert!(!m.chars().any(char::is_control));
            }
            let _ = op.permission();
        }
    }
});
