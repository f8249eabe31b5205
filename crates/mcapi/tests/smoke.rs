mod common;
use common::*;
use kioku_mcapi::*;

both!(ping_pong, |via| {
    let topo = topology(via, 2);
    run(&topo, |n| {
        let me = n.endpoint_create(1).unwrap();
        let other = n.endpoint_get(0, 1 - n.id(), 1, T).unwrap();
        for i in 0..100u32 {
            if n.id() == 0 {
                n.msg_send(me, other, &i.to_le_bytes(), 1).unwrap();
                let m = n.msg_recv(me).unwrap();
                assert_eq!(m, (i + 1).to_le_bytes());
            } else {
                let m = n.msg_recv(me).unwrap();
                let v = u32::from_le_bytes(m.try_into().unwrap());
                assert_eq!(v, i);
                n.msg_send(me, other, &(v + 1).to_le_bytes(), 1).unwrap();
            }
        }
        // Wait until the other side has its last message before finalizing.
        if n.id() == 1 {
            n.msg_send(me, other, b"bye", 0).unwrap();
        } else {
            assert_eq!(n.msg_recv(me).unwrap(), b"bye");
        }
    });
});

#[test]
fn get_only_shm() {
    let topo = topology(Via::Shm, 2);
    run(&topo, |n| {
        let _me = n.endpoint_create(1).unwrap();
        let r = n.endpoint_get(0, 1 - n.id(), 1, Some(std::time::Duration::from_secs(2)));
        eprintln!("node {} get: {:?} peer {:?}", n.id(), r, n.peer_state(1 - n.id()));
        std::thread::sleep(std::time::Duration::from_millis(300));
    });
}
