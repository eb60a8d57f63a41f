//! The fenced write (`fenced/write.lua`): its keys declared, its arguments strings.

use super::*;

/// `fenced/write.lua`, each of its writes: the resource and its mark are its KEYS, and every
/// argument it passes on is a string (the mark keeps the token as sent, trailing zeros and all).
#[tokio::test]
async fn the_fenced_write_script_touches_only_declared_keys_and_passes_only_strings() {
    let server = RedisServer::start();
    let mut c = server.async_connection().await;
    let write = script(&["fenced/write.lua"]);
    let token = "1712345678901000";
    let day = "86400000";
    let writes: [(&str, &[&str]); 7] = [
        ("res", &["set", "v"]),
        ("res", &["set_px", "v", "100000000"]),
        ("res", &["del"]),
        ("n", &["incr_by", "10"]),
        ("h", &["hset", "f", "v"]),
        ("h", &["hincr_by", "g", "10"]),
        ("h", &["hdel", "f"]),
    ];
    for (key, op) in writes {
        let mark = String::from_utf8(distlock::fenced::mark_key(key.as_bytes())).expect("UTF-8");
        let args: Vec<&str> = [token, day].into_iter().chain(op.iter().copied()).collect();
        let r = run(&mut c, op[0], &write, &[key, &mark], &args).await;
        assert_eq!(int(&r), 1, "{op:?} written");
        let stored: String = redis::cmd("GET")
            .arg(&mark)
            .query_async(&mut c)
            .await
            .expect("GET");
        assert_eq!(stored, token, "{op:?}");
        let stale = [&["1712345678900999", day][..], op].concat();
        let r = run(&mut c, op[0], &write, &[key, &mark], &stale).await;
        assert_eq!(int(&r), 0, "{op:?} refused");
    }
}
