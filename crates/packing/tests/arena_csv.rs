//! Reading and writing MiniMalloc CSV: every malformed input is an error naming its line and
//! field, nothing panics, and solutions round-trip.

use memplan_packing::csv::{self, CsvError};
use memplan_packing::{Buffer, BufferId, Problem, Solution};
use proptest::prelude::*;

#[test]
fn reads_the_minimalloc_format() {
    let parsed = csv::read("id,lower,upper,size\nb1,0,3,4\nb2,3,9,4\n").expect("valid");
    assert_eq!(
        parsed.problem.buffers,
        vec![Buffer::new(0, 3, 4), Buffer::new(3, 9, 4)]
    );
    let names: Vec<_> = parsed
        .problem
        .ids()
        .map(|id| parsed.problem.name(id))
        .collect();
    assert_eq!(names, ["b1", "b2"]);
    assert_eq!(parsed.solution, None);
}

#[test]
fn columns_may_come_in_any_order_with_optional_ones() {
    let text = "size, upper ,gaps,id,lower,alignment,hint,offset\r\n4,3,,b1,0,8,7,16\r\n\r\n";
    let parsed = csv::read(text).expect("valid");
    let b = &parsed.problem.buffers[0];
    assert_eq!(
        (
            parsed.problem.name(BufferId(0)).as_ref(),
            b.start,
            b.end,
            b.size,
            b.align
        ),
        ("b1", 0, 3, 4, 8)
    );
    assert_eq!(parsed.solution, Some(Solution { offsets: vec![16] }));
}

#[test]
fn the_old_inclusive_header_is_accepted() {
    let parsed = csv::read("id,start,end,size\nb,2,4,1\n").expect("valid");
    assert_eq!(
        (
            parsed.problem.buffers[0].start,
            parsed.problem.buffers[0].end
        ),
        (2, 5)
    );
}

#[test]
fn solutions_round_trip() {
    let problem = Problem::new(vec![
        Buffer::new(0, 3, 4),
        Buffer {
            align: 16,
            ..Buffer::new(1, 9, 5)
        },
    ])
    .with_names(["x", "y"]);
    let solution = Solution {
        offsets: vec![0, 16],
    };
    let text = csv::write(&problem, Some(&solution)).expect("writable");
    assert_eq!(
        text,
        "id,lower,upper,size,alignment,offset\nx,0,3,4,1,0\ny,1,9,5,16,16\n"
    );
    let back = csv::read(&text).expect("readable");
    assert_eq!(back.problem, problem);
    assert_eq!(back.solution, Some(solution));
}

#[test]
fn errors_name_the_line_and_field() {
    let cases: &[(&str, &str)] = &[
        ("", "empty"),
        ("\n  \n", "empty"),
        (
            "id,lower,upper\n",
            "line 1: the header has no `size` column",
        ),
        (
            "id,lower,upper,size,colour\n",
            "line 1: unknown column `colour`",
        ),
        (
            "id,lower,upper,size,size\n",
            "line 1: column `size` appears twice",
        ),
        (
            "id,lower,upper,size\na,0,1\n",
            "line 2: expected 4 fields as in the header, found 3",
        ),
        (
            "id,lower,upper,size\na,0,1,2,\n",
            "line 2: expected 4 fields as in the header, found 5",
        ),
        (
            "id,lower,upper,size\na,0,1,x\n",
            "line 2, field `size`: expected a non-negative integer",
        ),
        (
            "id,lower,upper,size\na,0,1,+3\n",
            "line 2, field `size`: expected a non-negative integer",
        ),
        (
            "id,lower,upper,size\na,-1,1,3\n",
            "line 2, field `lower`: -1 is negative",
        ),
        (
            "id,lower,upper,size\na,0,99999999999999999999,3\n",
            "line 2, field `upper`",
        ),
        (
            "id,lower,upper,size\na,5,5,3\n",
            "line 2: upper 5 is not greater than lower 5",
        ),
        (
            "id,lower,upper,size\n\na,0,1,3\na,1,2,3\n",
            "line 4, field `id`: \"a\" is already the id of line 3",
        ),
        (
            "id,lower,upper,size\n,0,1,3\n",
            "line 2, field `id`: the id is empty",
        ),
        (
            "id,lower,upper,size,alignment\na,0,1,3,12\n",
            "line 2, field `alignment`: 12 is not a power of two",
        ),
        (
            "id,lower,upper,size,alignment\na,0,1,3,0\n",
            "line 2, field `alignment`: 0 is not a power of two",
        ),
        (
            "id,lower,upper,size\na,0,1,18446744073709551615\nb,0,1,1\n",
            "line 3: the sizes up to this row add up to more than",
        ),
        (
            "id,lower,upper,size,offset\na,0,1,2,18446744073709551615\n",
            "line 2: offset 18446744073709551615 + size 2",
        ),
        (
            "id,start,end,size\na,0,18446744073709551615,2\n",
            "line 2, field `end`",
        ),
    ];
    for (text, expected) in cases {
        let err = csv::read(text).expect_err(text);
        assert!(
            err.to_string().contains(expected),
            "{text:?}: got {err}, expected {expected}"
        );
    }
}

#[test]
fn buffers_without_names_are_written_by_id() {
    let unnamed = Problem::new(vec![Buffer::new(0, 1, 1), Buffer::new(0, 2, 3)]);
    let text = csv::write(&unnamed, None).expect("writable");
    assert_eq!(text, "id,lower,upper,size\nbuf0,0,1,1\nbuf1,0,2,3\n");
    // A given name that is also the id another buffer is written with.
    let clash = unnamed.with_names(["buf1"]);
    assert_eq!(
        csv::write(&clash, None),
        Err(CsvError::DuplicateName {
            name: "buf1".to_owned()
        })
    );
    let twice =
        Problem::new(vec![Buffer::new(0, 1, 1), Buffer::new(0, 2, 3)]).with_names(["a", "a"]);
    assert!(matches!(
        csv::write(&twice, None),
        Err(CsvError::DuplicateName { .. })
    ));
}

/// RFC 4180 quoting: a quoted id holds commas, quotes (doubled), spaces and line breaks, and
/// numbers may be quoted too; line numbers in errors count the lines a quoted field spans.
#[test]
fn quoted_fields_are_read_as_rfc_4180_says() {
    let text = "id,lower,upper,size\n\"layer.0,attn\",0,3,4\n \"say \"\"hi\"\"\" ,\"1\",2,8\n\"two\nlines\",2,5,1\nplain\"quote,5,6,1\n";
    let parsed = csv::read(text).expect("valid");
    let names: Vec<String> = parsed
        .problem
        .ids()
        .map(|id| parsed.problem.name(id).into_owned())
        .collect();
    assert_eq!(
        names,
        ["layer.0,attn", "say \"hi\"", "two\nlines", "plain\"quote"]
    );
    assert_eq!(
        parsed.problem.buffers,
        vec![
            Buffer::new(0, 3, 4),
            Buffer::new(1, 2, 8),
            Buffer::new(2, 5, 1),
            Buffer::new(5, 6, 1)
        ]
    );
    // The quoted line break counts: the row after it is line 6.
    let dup = format!("{text}\"layer.0,attn\",0,1,1\n");
    let err = csv::read(&dup).expect_err("duplicate");
    assert_eq!(
        err,
        CsvError::DuplicateId {
            line: 7,
            id: "layer.0,attn".to_owned(),
            first_line: 2
        }
    );
    for (bad, expected) in [
        (
            "id,lower,upper,size\n\"open,0,1,1\n",
            "line 2: a quoted field (starting with `\"`) is not closed",
        ),
        (
            "id,lower,upper,size\n\"a\"b,0,1,1\n",
            "line 2: text after the closing quote of a field",
        ),
    ] {
        let err = csv::read(bad).expect_err(bad);
        assert!(err.to_string().contains(expected), "{bad:?}: {err}");
    }
}

/// Ids that need quoting are written quoted, and read back the same; an empty id cannot be
/// written.
#[test]
fn ids_that_need_quotes_round_trip() {
    let names = [
        "a,b",
        " a",
        "q\"",
        "line\nbreak",
        "cr\r\nlf",
        "\u{feff}bom",
        "plain",
    ];
    let problem =
        Problem::new(names.iter().map(|_| Buffer::new(0, 1, 1)).collect()).with_names(names);
    let text = csv::write(&problem, None).expect("writable");
    assert!(
        text.starts_with("id,lower,upper,size\n\"a,b\",0,1,1\n\" a\",0,1,1\n\"q\"\"\",0,1,1\n"),
        "{text}"
    );
    assert!(text.ends_with("\nplain,0,1,1\n"), "{text}");
    let back = csv::read(&text).expect("readable");
    assert_eq!(back.problem, problem);
    // A BOM is quoted only where it would start the file.
    let bom = Problem::new(vec![Buffer::new(0, 1, 1), Buffer::new(0, 1, 1)])
        .with_names(["\u{feff}x", "\u{feff}y"]);
    let text = csv::write(&bom, None).expect("writable");
    assert!(
        text.contains("\n\"\u{feff}x\",0,1,1\n\u{feff}y,0,1,1\n"),
        "{text:?}"
    );
    assert_eq!(csv::read(&text).expect("readable").problem, bom);
}

#[test]
fn unwritable_names_are_errors() {
    let problem = Problem::new(vec![Buffer::new(0, 1, 1)]).with_names([""]);
    assert!(matches!(
        csv::write(&problem, None),
        Err(CsvError::UnwritableName { .. })
    ));
    let problem = Problem::new(vec![Buffer::new(0, 1, 1)]);
    let err = csv::write(&problem, Some(&Solution { offsets: vec![] })).expect_err("count");
    assert_eq!(
        err,
        CsvError::OffsetCount {
            expected: 1,
            found: 0
        }
    );
}

proptest! {
    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        let text = String::from_utf8_lossy(&bytes);
        let _ = csv::read(&text);
        let _ = csv::read(&format!("id,lower,upper,size\n{text}"));
    }

    #[test]
    fn random_csv_like_text_never_panics(text in "[a-z0-9,\\-+ \n\"\r]{0,200}") {
        let _ = csv::read(&text);
        let _ = csv::read(&format!("id,lower,upper,size,alignment,offset\n{text}"));
    }

    #[test]
    fn written_problems_read_back(
        rows in proptest::collection::vec((0u64..1000, 1u64..1000, 0u64..1 << 40, 0u32..12, 0u64..1 << 40), 0..40)
    ) {
        let problem = Problem::new(
            rows.iter()
                .map(|&(s, l, size, a, _)| Buffer { align: 1 << a, ..Buffer::new(s, s + l, size) })
                .collect(),
        )
        .with_names(rows.iter().enumerate().map(|(i, r)| match r.3 % 4 {
            0 => format!("t{i}"),
            1 => format!("t,{i}"),
            2 => format!(" \"t\"{i}\n"),
            _ => format!("t\"{i}"),
        }));
        let solution = Solution { offsets: rows.iter().map(|r| r.4).collect() };
        let text = csv::write(&problem, Some(&solution)).expect("writable");
        let back = csv::read(&text).expect("readable");
        prop_assert_eq!(back.problem, problem);
        prop_assert_eq!(back.solution, Some(solution));
    }
}
