//! Unit tests of the REST bodies' reading: JSON and binary tensor data into the gRPC messages,
//! and the errors of bodies that do not say what they hold.

use featurelog_schemas::inference::infer_parameter::ParameterChoice;

use super::*;

fn all(_: &str) -> bool {
    true
}

fn raw_f32(raw: &[u8]) -> Vec<u32> {
    raw.chunks_exact(4)
        .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

#[test]
fn json_data_becomes_the_raw_contents_the_model_read() {
    let body = Bytes::from(
        r#"{"id":"r-1","parameters":{"user":"u7","k":3,"w":0.5,"on":true,"list":[1]},
           "inputs":[
             {"name":"price","shape":[2,2],"datatype":"FP32","data":[[0.1,-0.0],[1e-45,3.4028234663852886e38]]},
             {"name":"item_id","shape":[2],"datatype":"INT64","data":[9007199254740993,-2]},
             {"name":"locale","shape":[1],"datatype":"BYTES","data":["jp_JA"]},
             {"name":"flag","shape":[2],"datatype":"BOOL","data":[true,false]},
             {"name":"half","shape":[1],"datatype":"FP16","data":[0.1]}
           ],
           "outputs":[{"name":"score","parameters":{"binary_data":true}}]}"#,
    );
    let r = request(&body, None, "ranker", "2", &all, None).unwrap();
    assert_eq!(
        (
            r.model_name.as_str(),
            r.model_version.as_str(),
            r.id.as_str()
        ),
        ("ranker", "2", "r-1")
    );
    assert_eq!(r.inputs[0].shape, [2, 2]);
    assert_eq!(
        raw_f32(&r.raw_input_contents[0]),
        [
            0.1f32.to_bits(),
            (-0.0f32).to_bits(),
            1e-45f32.to_bits(),
            f32::MAX.to_bits()
        ]
    );
    let ids: Vec<i64> = r.raw_input_contents[1]
        .chunks_exact(8)
        .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(
        ids,
        [9_007_199_254_740_993, -2],
        "integers are not read through a double"
    );
    assert_eq!(&r.raw_input_contents[2][..], b"\x05\0\0\0jp_JA");
    assert_eq!(&r.raw_input_contents[3][..], [1, 0]);
    assert_eq!(
        &r.raw_input_contents[4][..],
        half::f16::from_f64(0.1).to_le_bytes()
    );
    let p = |k: &str| r.parameters[k].parameter_choice.clone().unwrap();
    assert_eq!(p("user"), ParameterChoice::StringParam("u7".into()));
    assert_eq!(p("k"), ParameterChoice::Int64Param(3));
    assert_eq!(p("w"), ParameterChoice::DoubleParam(0.5));
    assert_eq!(p("on"), ParameterChoice::BoolParam(true));
    assert!(!r.parameters.contains_key("list"));
    assert_eq!(r.outputs[0].name, "score");
}

#[test]
fn binary_tensor_data_is_taken_in_order_and_must_add_up() {
    let json = r#"{"inputs":[
        {"name":"a","shape":[2],"datatype":"FP32","parameters":{"binary_data_size":8}},
        {"name":"b","shape":[1],"datatype":"INT32","data":[7]},
        {"name":"c","shape":[1],"datatype":"BYTES","parameters":{"binary_data_size":6}}]}"#;
    let mut body = json.as_bytes().to_vec();
    body.extend_from_slice(&1.5f32.to_le_bytes());
    body.extend_from_slice(&(-2.0f32).to_le_bytes());
    body.extend_from_slice(b"\x02\0\0\0ok");
    let body = Bytes::from(body);
    let r = request(&body, Some(json.len()), "m", "", &all, None).unwrap();
    assert_eq!(
        raw_f32(&r.raw_input_contents[0]),
        [1.5f32.to_bits(), (-2.0f32).to_bits()]
    );
    assert_eq!(&r.raw_input_contents[1][..], 7i32.to_le_bytes());
    assert_eq!(&r.raw_input_contents[2][..], b"\x02\0\0\0ok");
    assert!(
        r.inputs[0].parameters.is_empty(),
        "the transport parameter is not the model's"
    );
    assert_eq!(peek_id(&body, Some(json.len())), None);

    // Too little data, too much, a header past the body.
    let short = body.slice(..body.len() - 1);
    assert_eq!(
        request(&short, Some(json.len()), "m", "", &all, None)
            .unwrap_err()
            .reason(),
        "malformed_json"
    );
    let mut long = body.to_vec();
    long.push(0);
    let err = request(&Bytes::from(long), Some(json.len()), "m", "", &all, None).unwrap_err();
    assert!(err.to_string().contains("belong to no tensor"), "{err}");
    assert!(request(&body, Some(body.len() + 1), "m", "", &all, None).is_err());
}

#[test]
fn bad_bodies_say_why_and_never_panic() {
    let req = |json: &str| request(&Bytes::from(json.to_owned()), None, "m", "", &all, None);
    for (json, reason) in [
        ("{not json", "malformed_json"),
        (
            r#"{"inputs":[{"name":"a","shape":[1],"datatype":"FP32"}]}"#,
            "malformed_json",
        ),
        (
            r#"{"inputs":[{"name":"a","shape":[1],"datatype":"FP32","data":["x"]}]}"#,
            "bad_json_data",
        ),
        (
            r#"{"inputs":[{"name":"a","shape":[1],"datatype":"INT8","data":[300]}]}"#,
            "bad_json_data",
        ),
        (
            r#"{"inputs":[{"name":"a","shape":[1],"datatype":"UINT8","data":[-1]}]}"#,
            "bad_json_data",
        ),
        (
            r#"{"inputs":[{"name":"a","shape":[1],"datatype":"INT32","data":[1.5]}]}"#,
            "bad_json_data",
        ),
        (
            r#"{"inputs":[{"name":"a","shape":[1],"datatype":"BOOL","data":[1]}]}"#,
            "bad_json_data",
        ),
        (
            r#"{"inputs":[{"name":"a","shape":[1],"datatype":"COMPLEX","data":[1]}]}"#,
            "bad_json_data",
        ),
        (
            r#"{"inputs":[{"name":"a","shape":[1],"datatype":"FP32","data":[1],"parameters":{"binary_data_size":4}}]}"#,
            "malformed_json",
        ),
        (
            r#"{"inputs":[{"name":"a","shape":[1],"datatype":"FP32","parameters":{"binary_data_size":-4}}]}"#,
            "malformed_json",
        ),
    ] {
        assert_eq!(req(json).unwrap_err().reason(), reason, "{json}");
    }
}

#[test]
fn data_is_found_whatever_it_holds_and_a_cut_body_is_refused_without_a_panic() {
    // Strings holding brackets, quotes and escapes; nesting; whitespace around the colon;
    // an escaped key; `data` members that are not a tensor's (in parameters) left alone.
    let json = r#"{ "parameters" : {"data":"p"},
        "inputs" : [
          {"name":"tags","shape":[3],"datatype":"BYTES","parameters":{"data":[9]},
           "data" : ["a]b[", "q\"uo\\te\"", "}{"]},
          {"name":"grid","shape":[2,2],"datatype":"INT32","data":[[1,2],[3,4]]},
          {"name":"one","shape":[1],"datatype":"FP64","data":2.5e0},
          {"name":"skip","shape":[1],"datatype":"BYTES","data":["]]]\"[[["]}
        ]}"#;
    let body = Bytes::from(json);
    let r = request(&body, None, "m", "", &|n| n != "skip", None).unwrap();
    let names: Vec<&str> = r.inputs.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["tags", "grid", "one"]);
    assert_eq!(
        &r.raw_input_contents[0][..],
        b"\x04\0\0\0a]b[\x08\0\0\0q\"uo\\te\"\x02\0\0\0}{"
    );
    let grid: Vec<i32> = r.raw_input_contents[1]
        .chunks_exact(4)
        .map(|c| i32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(grid, [1, 2, 3, 4]);
    assert_eq!(&r.raw_input_contents[2][..], 2.5f64.to_le_bytes());
    assert_eq!(
        r.parameters["data"].parameter_choice,
        Some(ParameterChoice::StringParam("p".into()))
    );
    // Every prefix of the body: an error or (never) a wrong answer, and no panic.
    for end in 0..json.len() {
        assert!(
            request(&body.slice(..end), None, "m", "", &all, None).is_err(),
            "{end}"
        );
    }
}

/// A tensor's raw contents as the model server reads them from the whole body parsed as
/// JSON (a plain tree, no outline): `None` for what this reference does not model.
fn reference(tensor: &serde_json::Value) -> Option<(String, Vec<i64>, Vec<u8>)> {
    fn flat<'a>(v: &'a serde_json::Value, out: &mut Vec<&'a serde_json::Value>) {
        match v {
            serde_json::Value::Array(items) => items.iter().for_each(|i| flat(i, out)),
            other => out.push(other),
        }
    }
    let name = tensor.get("name")?.as_str()?.to_owned();
    let shape = (tensor.get("shape")?.as_array()?.iter())
        .map(serde_json::Value::as_i64)
        .collect::<Option<Vec<i64>>>()?;
    let mut values = Vec::new();
    flat(tensor.get("data")?, &mut values);
    let mut raw = Vec::new();
    for v in values {
        match tensor.get("datatype")?.as_str()? {
            "FP32" => raw.extend((v.as_f64()? as f32).to_le_bytes()),
            "INT64" => raw.extend(v.as_i64()?.to_le_bytes()),
            "BYTES" => {
                let s = v.as_str()?;
                raw.extend(u32::try_from(s.len()).ok()?.to_le_bytes());
                raw.extend(s.as_bytes());
            }
            _ => return None,
        }
    }
    Some((name, shape, raw))
}

/// Bodies changed at random in the bytes JSON is made of: never a panic, and whatever the
/// outline reads from a body that is valid JSON is what a plain parse of the whole body
/// reads: the same id, and each tensor's name, shape and contents. The outline steps over
/// strings, brackets and escapes by hand: a slip would log one tensor's values under
/// another's name.
#[test]
fn mutated_bodies_never_panic_and_read_as_a_whole_parse_reads_them() {
    let good = br#"{"id":"r-[1]","parameters":{"note":"a \"data\": [9]","data":[1]},
        "inputs":[
          {"name":"price","shape":[2,2],"datatype":"FP32","data":[[0.5,-1e-3],[2,3.25]]},
          {"name":"item_id","shape":[2],"datatype":"INT64","data":[12,-7]},
          {"name":"tags","shape":[2],"datatype":"BYTES","data":["x]\"{","\u0041b"]},
          {"name":"d\u0061ta","shape":[1],"datatype":"FP32","data":[1.5]}
        ],
        "outputs":[{"name":"score"}]}"#;
    let alphabet = br#"[]{}",:\ 0123456789.-eE datatypeshape"#;
    let mut rng = fastrand::Rng::with_seed(0x853c_49e6_748f_ea9b);
    let mut next = || rng.u64(..);
    let (mut read, mut compared) = (0, 0);
    for _ in 0..20_000 {
        let mut body = good.to_vec();
        for _ in 0..1 + next() % 2 {
            let at = (next() % body.len() as u64) as usize;
            let b = alphabet[(next() % alphabet.len() as u64) as usize];
            match next() % 3 {
                0 => body[at] = b,
                1 => body.insert(at, b),
                _ => {
                    body.remove(at);
                }
            }
        }
        let bytes = Bytes::from(body.clone());
        let Ok(r) = request(&bytes, None, "m", "", &all, None) else {
            continue;
        };
        read += 1;
        // The id handed back to the caller is the one the record carries.
        assert_eq!(peek_id(&bytes, None).unwrap_or_default(), r.id);
        let Ok(whole) = serde_json::from_slice::<serde_json::Value>(&body) else {
            continue;
        };
        let text = String::from_utf8_lossy(&body);
        assert_eq!(
            r.id,
            whole.get("id").and_then(|i| i.as_str()).unwrap_or_default(),
            "{text}"
        );
        let inputs = whole["inputs"].as_array().expect("inputs were read");
        assert_eq!(inputs.len(), r.inputs.len(), "{text}");
        for ((tensor, raw), json) in r.inputs.iter().zip(&r.raw_input_contents).zip(inputs) {
            let Some((name, shape, want)) = reference(json) else {
                continue;
            };
            assert_eq!(
                (&tensor.name, &tensor.shape, raw.as_ref()),
                (&name, &shape, want.as_slice()),
                "{text}"
            );
            compared += 1;
        }
    }
    assert!(
        read > 2_000 && compared > 5_000,
        "{read} read, {compared} compared"
    );
}

/// A binary-data request as `tritonclient.http` sends it, with `id` as the JSON text of
/// its id member (none when empty).
fn binary_request(id: &str, rows: usize) -> (Bytes, usize) {
    let id = if id.is_empty() {
        String::new()
    } else {
        format!(r#""id":{id},"#)
    };
    let json = format!(
        r#"{{{id}"parameters":{{"user":"u7"}},"inputs":[
          {{"name":"item_id","shape":[{rows}],"datatype":"INT64","parameters":{{"binary_data_size":{}}}}},
          {{"name":"price","shape":[{rows}],"datatype":"FP32","parameters":{{"binary_data_size":{},"note":"x"}}}},
          {{"name":"tags","shape":[1],"datatype":"BYTES","parameters":{{"binary_data_size":6}}}}],
          "outputs":[{{"name":"score","parameters":{{"binary_data":true}}}}]}}"#,
        rows * 8,
        rows * 4
    );
    let mut body = json.as_bytes().to_vec();
    body.extend((0..rows as i64).flat_map(|i| (i * 7 - 3).to_le_bytes()));
    body.extend((0..rows).flat_map(|i| (i as f32 * 0.5).to_le_bytes()));
    body.extend(b"\x02\0\0\0ok");
    (Bytes::from(body), json.len())
}

/// A header seen before is not read again, and what comes of it is exactly what reading
/// it gives: for other ids (escaped, null, absent, not a string), other wanted tensors,
/// other row counts, and bodies changed at random in their JSON or binary part.
#[test]
fn kept_headers_read_exactly_as_reading_them_again() {
    let mut cache = HeaderCache::default();
    let some = |n: &str| n != "price";
    let wanted: [&dyn Fn(&str) -> bool; 2] = [&all, &some];
    let check = |cache: &mut HeaderCache, body: &Bytes, len: usize| {
        for w in wanted {
            let fresh = request(body, Some(len), "m", "1", w, None);
            let kept = request(body, Some(len), "m", "1", w, Some(cache));
            assert_eq!(kept, fresh, "{:?}", String::from_utf8_lossy(body));
            if let Ok(r) = fresh {
                assert_eq!(peek_id(body, Some(len)).unwrap_or_default(), r.id);
            }
        }
    };
    for (id, rows) in [
        (r#""r-1""#, 3),
        (r#""r-2""#, 3),
        (r#""r\"3\u0041""#, 3),
        ("null", 3),
        ("", 3),
        ("17", 3),
        (r#"["r"]"#, 3),
        (r#""r-4""#, 5),
        (r#""r-5""#, 3),
    ] {
        let (body, len) = binary_request(id, rows);
        check(&mut cache, &body, len);
    }
    assert_eq!(
        cache.entries.len(),
        3,
        "one header per row count, and one without an id"
    );
    let (good, len) = binary_request(r#""r-6""#, 3);
    let hit = request(&good, Some(len), "m", "1", &all, Some(&mut cache)).unwrap();
    assert_eq!(hit.id, "r-6");
    assert_eq!(hit.inputs.len(), 3);
    assert_eq!(&hit.raw_input_contents[2][..], b"\x02\0\0\0ok");

    let alphabet = br#"[]{}",:\ 0123456789.-rxnul"#;
    let mut rng = fastrand::Rng::with_seed(0x6a09_e667_f3bc_c908);
    let mut next = || rng.u64(..);
    for _ in 0..5_000 {
        let mut body = good.to_vec();
        let mut header_len = len;
        // Mostly the id's value (which keeps the key), else anywhere.
        let at = if next() % 2 == 0 {
            5 + (next() % 6) as usize
        } else {
            (next() % body.len() as u64) as usize
        };
        let b = alphabet[(next() % alphabet.len() as u64) as usize];
        match next() % 3 {
            0 => body[at] = b,
            1 => {
                body.insert(at, b);
                header_len += usize::from(at < len);
            }
            _ => {
                body.remove(at);
                header_len -= usize::from(at < len);
            }
        }
        check(&mut cache, &Bytes::from(body), header_len);
    }
}

#[test]
fn only_the_wanted_tensors_are_read() {
    // An unread tensor may hold anything; binary data of skipped tensors is stepped over.
    let json = r#"{"inputs":[
        {"name":"skipped","shape":[1],"datatype":"FP32","data":["not a number"]},
        {"name":"bin_skipped","shape":[1],"datatype":"FP32","parameters":{"binary_data_size":4}},
        {"name":"kept","shape":[1],"datatype":"INT32","parameters":{"binary_data_size":4}}]}"#;
    let mut body = json.as_bytes().to_vec();
    body.extend_from_slice(&1.0f32.to_le_bytes());
    body.extend_from_slice(&9i32.to_le_bytes());
    let r = request(
        &Bytes::from(body),
        Some(json.len()),
        "m",
        "",
        &|n| n == "kept",
        None,
    )
    .unwrap();
    assert_eq!(r.inputs.len(), 1);
    assert_eq!(r.inputs[0].name, "kept");
    assert_eq!(&r.raw_input_contents[0][..], 9i32.to_le_bytes());
}

#[test]
fn responses_read_json_and_binary_outputs() {
    // As KServe's server writes them: absent members as null.
    let kserve = br#"{"model_name":"ranker","model_version":null,"id":"a","parameters":null,
        "outputs":[{"name":"score","shape":[2],"datatype":"FP32","parameters":null,"data":[3.0,7.5]}]}"#;
    let r = response(&Bytes::from_static(kserve), None, &all).unwrap();
    assert_eq!(
        (r.model_version.as_str(), r.outputs[0].name.as_str()),
        ("", "score")
    );
    let json = r#"{"model_name":"ranker","model_version":"1","id":"r-1","outputs":[
        {"name":"score","shape":[2],"datatype":"FP32","parameters":{"binary_data_size":8}},
        {"name":"label","shape":[1],"datatype":"BYTES","data":["a"]}]}"#;
    let mut body = json.as_bytes().to_vec();
    body.extend_from_slice(&0.25f32.to_le_bytes());
    body.extend_from_slice(&0.75f32.to_le_bytes());
    let r = response(&Bytes::from(body), Some(json.len()), &all).unwrap();
    assert_eq!(r.model_name, "ranker");
    assert_eq!(r.outputs[0].shape, [2]);
    assert_eq!(
        raw_f32(&r.raw_output_contents[0]),
        [0.25f32.to_bits(), 0.75f32.to_bits()]
    );
    assert_eq!(&r.raw_output_contents[1][..], b"\x01\0\0\0a");
    assert_eq!(
        peek_id(&Bytes::from_static(br#"{"inputs":[],"id":"x"}"#), None).as_deref(),
        Some("x")
    );
}
