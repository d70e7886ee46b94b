//! A pickle virtual machine that never imports or calls anything. Globals are names checked
//! against an allowlist (`super::globals`); REDUCE/NEWOBJ/BUILD record what would be called as
//! nodes; torch's tensor rebuild calls become tensor nodes. Memo, stack, marks and node count
//! are bounded. One machine, `vm::Vm`, in four files, each method calling only those of files
//! above it: `vm` (state and bounded primitives) < `tensor` (tensor rebuilds) < `calls`
//! (globals, REDUCE/NEWOBJ/BUILD, APPEND/SETITEMS) < `ops` (the opcode loop, `unpickle`).

mod calls;
mod ops;
mod tensor;
mod vm;

pub use super::globals::{storage_dtype, torch_dtype, GlobalPolicy, KNOWN_DATA_GLOBALS};
pub use ops::unpickle;
pub use vm::{Limits, Origin};

#[cfg(test)]
mod tests {
    use super::vm::R;
    use super::*;
    use crate::error::Error;
    use crate::formats::torch::value::{Node, Pickle};
    use std::path::Path;

    /// Where the test pickles are said to lie.
    fn at() -> Origin<'static> {
        Origin {
            path: Path::new("test.pkl"),
            record: "",
        }
    }

    fn run(bytes: &[u8]) -> R<Pickle> {
        unpickle(bytes, at(), &GlobalPolicy::default(), Limits::default()).map(|(p, _)| p)
    }

    #[test]
    fn protocol_0_text_opcodes_build_the_same_values_python_does() {
        // pickle.dumps([1, 2.5, {'key': 3}, True, 'é', 12345678901, (None,)], protocol=0)
        let p = run(
            b"(lp0\nI1\naF2.5\na(dp1\nVkey\np2\nI3\nsaI01\naV\xe9\np3\naL12345678901L\na(Ntp4\na.",
        )
        .unwrap();
        let Node::List(items) = p.node(p.root) else {
            panic!("not a list")
        };
        let kinds: Vec<&Node> = items.iter().map(|&i| p.node(i)).collect();
        assert_eq!(kinds[0], &Node::Int(1));
        assert_eq!(kinds[1], &Node::Float(2.5));
        assert_eq!(
            p.get(items[2], "key").map(|v| p.node(v)),
            Some(&Node::Int(3))
        );
        assert_eq!(kinds[3], &Node::Bool(true));
        assert_eq!(kinds[4], &Node::Str("é".into()));
        assert_eq!(kinds[5], &Node::Int(12_345_678_901));
        assert!(matches!(kinds[6], Node::Tuple(t) if t.len() == 1));
    }

    #[test]
    fn protocol_4_frames_memoize_and_short_strings_are_read() {
        // pickle.dumps({'a': b'xy', 'b': {1, 2}}, protocol=4)
        let bytes = b"\x80\x04\x95\x1a\x00\x00\x00\x00\x00\x00\x00\x7d\x94\x28\x8c\x01\x61\x94\x43\x02\x78\x79\x94\x8c\x01\x62\x94\x8f\x94\x28\x4b\x01\x4b\x02\x90\x75\x2e";
        let p = run(bytes).unwrap();
        assert_eq!(
            p.get(p.root, "a").map(|v| p.node(v)),
            Some(&Node::Bytes(b"xy".to_vec()))
        );
        assert!(
            matches!(p.get(p.root, "b").map(|v| p.node(v)), Some(Node::Set(s)) if s.len() == 2)
        );
    }

    #[test]
    fn memo_get_shares_the_node_instead_of_copying_it() {
        // l = []; [l, l]: the second element is a GET of the first.
        let p = run(b"\x80\x02](]q\x00h\x00e.").unwrap();
        let Node::List(items) = p.node(p.root) else {
            panic!()
        };
        assert_eq!(items[0], items[1]);
    }

    #[test]
    fn bounds_are_enforced_not_run_into() {
        let small = Limits {
            max_nodes: 10,
            max_stack: 4,
            max_marks: 2,
            max_memo: 1,
        };
        let many = [b"\x80\x02".as_slice(), &[b'N'; 20], b"."].concat();
        let e = unpickle(&many, at(), &GlobalPolicy::default(), small).unwrap_err();
        assert!(e.to_string().contains("stack deeper than 4"), "{e:?}");
        let marks = b"\x80\x02(((N";
        let e = unpickle(marks, at(), &GlobalPolicy::default(), small).unwrap_err();
        assert!(e.to_string().contains("nested marks"), "{e:?}");
        let memo = b"\x80\x02Nq\x00q\x01.";
        let e = unpickle(memo, at(), &GlobalPolicy::default(), small).unwrap_err();
        assert!(e.to_string().contains("memo larger than 1"), "{e:?}");
        let nodes = [b"\x80\x02(".as_slice(), &[b'N'; 12], b"l."].concat();
        let e = unpickle(
            &nodes,
            at(),
            &GlobalPolicy::default(),
            Limits {
                max_stack: 100,
                ..small
            },
        )
        .unwrap_err();
        assert!(e.to_string().contains("more than 10 values"), "{e:?}");
    }

    #[test]
    fn malformed_pickles_are_errors_with_positions_never_panics() {
        let cases: [(&[u8], &str); 10] = [
            (b"", "pickle ends early"),
            (b"\x80\x02", "pickle ends early"),
            (b"\x80\x09N.", "protocol 9"),
            (b"\x80\x02X\xff\xff\xff\x7fab.", "runs past the end"),
            (b"\x80\x02h\x05.", "memo key 5 read before it was written"),
            (b"\x80\x02.", "stack underflow"),
            (b"\x80\x02e.", "no mark"),
            (b"\x80\x02NNs.", "stack underflow"),
            (b"\x80\x02\x82\x01.", "extension-registry"),
            (b"\x80\x02\xff.", "unknown opcode 0xff"),
        ];
        for (bytes, want) in cases {
            let e = run(bytes).unwrap_err();
            assert!(e.to_string().contains(want), "{bytes:?}: {e:?}");
        }
        // Every prefix of a real pickle fails cleanly.
        let real = b"\x80\x02}q\x00(X\x01\x00\x00\x00aK\x01X\x01\x00\x00\x00b]q\x01(G?\xf0\x00\x00\x00\x00\x00\x00\x89eu.";
        assert!(run(real).is_ok());
        for n in 0..real.len() {
            assert!(run(&real[..n]).is_err(), "prefix {n}");
        }
    }

    #[test]
    fn globals_outside_the_allowlist_are_refused_by_name_and_position() {
        let e = run(b"\x80\x02cos\nsystem\nX\x02\x00\x00\x00ls\x85R.").unwrap_err();
        assert!(
            matches!(&e, Error::UnknownGlobal { global, offset: 2, allowable: false, .. } if global == "os.system"),
            "{e:?}"
        );
        assert_eq!(
            e.to_string(),
            "test.pkl: refused global os.system at byte 2"
        );
        assert_eq!(e.flag(), None, "no flag allows a code-running global");
        let e = run(b"\x80\x02cargparse\nNamespace\n).").unwrap_err();
        assert_eq!(e.flag(), Some("--allow-global"));
        assert!(e.to_string().contains("--allow-global argparse.Namespace"));
        let mut policy = GlobalPolicy::default();
        policy.extra.insert("argparse.Namespace".into());
        assert!(unpickle(
            b"\x80\x02cargparse\nNamespace\n)\x81.",
            at(),
            &policy,
            Limits::default()
        )
        .is_ok());
        // Python 2 names are mapped before the check, as Python's unpickler maps them.
        assert!(run(b"\x80\x02c__builtin__\nset\n](K\x01e\x85R.").is_ok());
        assert!(run(b"\x80\x02c__builtin__\neval\n.").is_err());
    }
    #[test]
    fn values_torch_cannot_load_are_refused_naming_why() {
        // A tensor of int64 (a LongStorage of 2), requires_grad as given, location as given.
        let tensor = |grad: &[u8], location: &[u8]| {
            [
                b"\x80\x02ctorch._utils\n_rebuild_tensor_v2\n((X\x07\x00\x00\x00storagectorch\nLongStorage\nX\x01\x00\x00\x000".as_slice(),
                location,
                b"K\x02tQK\x00K\x02\x85K\x01\x85",
                grad,
                b"ccollections\nOrderedDict\n)RtR.",
            ]
            .concat()
        };
        let cpu = b"X\x03\x00\x00\x00cpu".as_slice();
        assert!(run(&tensor(b"\x89", cpu)).is_ok());
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (
                b"\x80\x02}]K\x01s.".to_vec(),
                "a dict key that is a list of 0, which Python cannot hash",
            ),
            (
                b"\x80\x02}}\x85K\x01s.".to_vec(),
                "a dict key that is a dict of 0",
            ),
            (
                b"\x80\x02c__builtin__\nset\n]]a\x85R.".to_vec(),
                "a set member that is a list",
            ),
            (
                b"\x80\x04\x8f(]\x90.".to_vec(),
                "a set member that is a list",
            ),
            (
                b"\x80\x02ctorch\nSize\nX\x01\x00\x00\x00a\x85R.".to_vec(),
                "torch.Size called with (a string)",
            ),
            (
                b"\x80\x02ctorch\ndevice\nK\x01\x85R.".to_vec(),
                "torch.device called with (an int)",
            ),
            (
                b"\x80\x02ctorch\nFloatStorage\n)R.".to_vec(),
                "never calls it",
            ),
            (
                b"\x80\x02c__builtin__\nset\n)\x81.".to_vec(),
                "builtins.set made by NEWOBJ",
            ),
            (
                b"\x80\x02K\x00Q.".to_vec(),
                "a persistent id that is an int",
            ),
            (b"\x80\x02P0\n.".to_vec(), "PERSID"),
            (tensor(b"\x88", cpu), "a tensor of int64 that requires grad"),
            (
                tensor(b"\x89", b"K\x00"),
                "storage location is not a string",
            ),
        ];
        for (bytes, want) in cases {
            let e = run(&bytes).unwrap_err();
            assert!(e.to_string().contains(want), "{want}: {e}");
        }
        // frozenset, by global or by opcode: torch's loader refuses it, so --allow-global only.
        let mut allowed = GlobalPolicy::default();
        allowed.extra.insert("builtins.frozenset".into());
        for bytes in [
            &b"\x80\x02c__builtin__\nfrozenset\n]\x85R."[..],
            b"\x80\x04(\x91.",
        ] {
            let e = run(bytes).unwrap_err();
            assert!(
                e.to_string().contains("--allow-global builtins.frozenset"),
                "{e}"
            );
            assert!(unpickle(bytes, at(), &allowed, Limits::default()).is_ok());
        }
    }

    #[test]
    fn a_dict_given_one_key_twice_is_refused_as_python_would_keep_only_the_last() {
        // {'w': 1, 'w': 2} as SETITEMS writes it; Python's unpickler keeps {'w': 2}.
        let e = run(b"\x80\x02}(X\x01\x00\x00\x00wK\x01X\x01\x00\x00\x00wK\x02u.").unwrap_err();
        assert!(e.to_string().contains("the key 'w' twice"), "{e}");
        // 1 and True are one key in Python; an OrderedDict (a state dict) likewise.
        let e = run(b"\x80\x02}(K\x01K\x01\x88K\x02u.").unwrap_err();
        assert!(e.to_string().contains("twice"), "{e}");
        let od = b"\x80\x02ccollections\nOrderedDict\n)R(X\x01\x00\x00\x00aK\x01X\x01\x00\x00\x00aK\x02u.";
        assert!(run(od)
            .unwrap_err()
            .to_string()
            .contains("the key 'a' twice"));
        // Distinct keys, 1 beside 1.5 and 'a' beside b'a', are kept.
        let p = run(b"\x80\x03}(X\x01\x00\x00\x00aK\x01C\x01aK\x02K\x01K\x03G?\xf8\x00\x00\x00\x00\x00\x00K\x04u.").unwrap();
        assert!(matches!(p.node(p.root), Node::Dict(e) if e.len() == 4));
        // Tuples compare element by element ((1,) is (True,)); 1.5 is itself.
        let e = run(b"\x80\x02}(K\x01\x85K\x01\x88\x85K\x02u.").unwrap_err();
        assert!(e.to_string().contains("a key (a tuple of 1) twice"), "{e}");
        let e = run(
            b"\x80\x02}(G?\xf8\x00\x00\x00\x00\x00\x00K\x01G?\xf8\x00\x00\x00\x00\x00\x00K\x02u.",
        )
        .unwrap_err();
        assert!(e.to_string().contains("a key (a float) twice"), "{e}");
        assert!(run(b"\x80\x02}(K\x01\x85K\x01K\x02\x85K\x02u.").is_ok());
    }

    /// `_rebuild_tensor_v2` of a LongStorage of 2 with `meta` (pickle bytes) as its metadata.
    fn tensor_with_metadata(meta: &[u8]) -> Vec<u8> {
        [
            b"\x80\x02ctorch._utils\n_rebuild_tensor_v2\n((X\x07\x00\x00\x00storagectorch\nLongStorage\nX\x01\x00\x00\x000X\x03\x00\x00\x00cpuK\x02tQK\x00K\x02\x85K\x01\x85\x89ccollections\nOrderedDict\n)R".as_slice(),
            meta,
            b"tR.",
        ]
        .concat()
    }

    #[test]
    fn a_tensor_with_a_lazy_negative_or_conjugate_bit_is_refused() {
        // torch.save of torch._neg_view(x) writes {'neg': True}: torch.load negates the bytes.
        for (meta, want) in [
            (&b"}X\x03\x00\x00\x00neg\x88s"[..], "lazy 'neg' bit set"),
            (b"}X\x04\x00\x00\x00conj\x88s", "lazy 'conj' bit set"),
            (b"}X\x03\x00\x00\x00zap\x89s", "holds 'zap'"),
        ] {
            let e = run(&tensor_with_metadata(meta)).unwrap_err();
            assert!(e.to_string().contains(want), "{want}: {e}");
        }
        assert!(run(&tensor_with_metadata(b"}X\x03\x00\x00\x00neg\x89s")).is_ok());
        assert!(run(&tensor_with_metadata(b"}")).is_ok());
    }

    #[test]
    fn a_parameter_called_directly_is_refused_as_torch_save_never_writes_it() {
        // Parameter(tensor, False) by REDUCE: torch.load returns a Parameter; we would have
        // named its tensor after the call's arguments.
        let mut bytes = b"\x80\x02ctorch.nn.parameter\nParameter\n(".to_vec();
        let t = tensor_with_metadata(b"}");
        bytes.extend_from_slice(&t[2..t.len() - 1]);
        bytes.extend_from_slice(b"\x89tR.");
        let e = run(&bytes).unwrap_err();
        assert!(e.to_string().contains("Parameter called directly"), "{e}");
    }
}
