from lab.vocab.thread_dumps import AGENT, WORKER, dump_file_name, read_dump_file_name


def test_a_dump_file_name_says_its_role_and_pid():
    assert read_dump_file_name(dump_file_name(WORKER, 4242)) == (WORKER, 4242)
    assert read_dump_file_name(dump_file_name(AGENT, 7)) == (AGENT, 7)


def test_other_files_are_not_dump_files():
    for name in ("worker-12.txt.tmp", "worker-.txt", "notes.txt", "worker-12", "Worker-12.txt"):
        assert read_dump_file_name(name) is None, name
