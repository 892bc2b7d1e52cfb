import os
import re

from hypothesis import given, settings, strategies as st
from twisted.trial import unittest

from deaddrop.newsroom import codenames
from deaddrop.newsroom.filenames import MAX_NAME_BYTES, sanitise_filename


class WordlistTests(unittest.TestCase):
    def test_codename_wordlist_is_large_short_common_ascii(self):
        words = codenames.codename_words()
        self.assertGreaterEqual(len(words), 7000)
        self.assertEqual(len(set(words)), len(words))
        self.assertTrue(all(re.fullmatch(r"[a-z]+(-[a-z]+)?", w) and len(w) <= 9 for w in words))
        self.assertGreater(codenames.entropy_bits(7), 90)

    def test_generated_codenames_have_n_known_words_and_differ(self):
        seen = set()
        for n in (4, 7, 12):
            for _ in range(20):
                codename = codenames.generate_codename(n)
                self.assertEqual(len(codename.split(" ")), n)
                self.assertEqual(codenames.normalise_codename(codename), codename)
                seen.add(codename)
        self.assertEqual(len(seen), 60)

    def test_designations_are_two_different_adjectives_and_a_noun_from_their_own_lists(self):
        seen = set()
        for _ in range(300):
            designation = codenames.generate_designation()
            first, second, noun = designation.split(" ")
            self.assertNotEqual(first, second)
            self.assertIn(first, codenames._load("adjectives.txt"))
            self.assertIn(second, codenames._load("adjectives.txt"))
            self.assertIn(noun, codenames._load("nouns.txt"))
            seen.add(designation)
        self.assertEqual(len(seen), 300)
        adjectives, nouns = (len(codenames._load(n)) for n in codenames.DESIGNATION_LISTS)
        self.assertEqual(codenames.designation_space(), adjectives * (adjectives - 1) * nouns)
        self.assertGreaterEqual(codenames.designation_space(), 10**8)


def denied_words() -> set[str]:
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "denied-words.txt")
    with open(path, encoding="utf-8") as f:
        return {w for line in f if not line.startswith("#") for w in line.split()}


class CuratedListTests(unittest.TestCase):
    """Designations journalists say aloud, and codenames a frightened source reads (issue 17 §4)."""

    def test_the_deny_list_is_real(self):
        denied = denied_words()
        self.assertGreater(len(denied), 300)
        # The words a source was shown to journalists as, before the lists were curated.
        for word in ["psychotic", "stupid", "maniacal", "drunk", "fat", "moron", "terrorist", "racist", "liar",
                     "thief", "rat", "leaker", "spy", "mole", "suicide", "infancy"]:
            self.assertIn(word, denied)

    def test_no_denied_word_is_in_a_designation_list(self):
        denied = denied_words()
        for name in codenames.DESIGNATION_LISTS:
            words = codenames._load(name)
            self.assertEqual(sorted(set(words) & denied), [], name)

    def test_no_denied_word_is_drawn_for_a_new_codename_and_old_codenames_still_work(self):
        denied = denied_words()
        drawable = set(codenames.drawable_codename_words())
        self.assertEqual(sorted(drawable & denied), [])
        retired = set(codenames._load(codenames.RETIRED_LIST))
        self.assertEqual(retired, set(codenames.codename_words()) & denied)
        self.assertEqual(drawable | retired, set(codenames.codename_words()))
        for _ in range(200):
            self.assertFalse(set(codenames.generate_codename(7).split()) & denied)
        # A codename made before a word was retired is still a codename.
        old = " ".join(sorted(retired)[:7])
        self.assertEqual(codenames.normalise_codename(old), old)

    def test_the_counts_the_wordlists_readme_states(self):
        with open(os.path.join(codenames.WORDLIST_DIR, "README.md"), encoding="utf-8") as f:
            readme = f.read()
        adjectives, nouns = (codenames._load(n) for n in codenames.DESIGNATION_LISTS)
        drawable = codenames.drawable_codename_words()
        for stated in [f"{len(adjectives):,} adjectives", f"{len(nouns):,} nouns",
                       f"{len(adjectives) * len(nouns):,} designations",
                       f"{len(adjectives)} × {len(adjectives) - 1} × {len(nouns):,} = {codenames.designation_space():,} "
                       "designations",
                       f"{len(drawable):,} words",
                       f"{len(codenames.codename_words()) - len(drawable)} retired"]:
            self.assertIn(stated, readme)
        self.assertGreaterEqual(len(drawable) ** 7, 10**8)
        self.assertGreater(codenames.entropy_bits(7), 90)
        self.assertGreaterEqual(codenames.designation_space(), codenames.MIN_DESIGNATIONS)
        self.assertEqual(codenames.MIN_DESIGNATIONS, 10**8)


class NormaliseTests(unittest.TestCase):
    def test_whitespace_and_case_do_not_matter(self):
        self.assertEqual(codenames.normalise_codename("  Abacus\tabdomen \n ABIDE   ablaze  "), "abacus abdomen abide ablaze")

    def test_commas_hyphens_dots_and_new_lines_separate_words(self):
        typed = "Abacus, abdomen-ABIDE.ablaze;\nt-shirt - drop-down,,yo-yo"
        self.assertEqual(codenames.normalise_codename(typed),
                         "abacus abdomen abide ablaze t-shirt drop-down yo-yo")

    def test_no_part_of_a_hyphenated_word_is_a_word_itself(self):
        """Why _split_hyphens may join greedily: "t-shirt" can only ever be one word."""
        words = set(codenames.codename_words())
        for word in (w for w in words if "-" in w):
            self.assertNotIn(word.split("-")[0], words, word)

    def test_shapes_that_cannot_be_codenames(self):
        for text in ["", "abacus abdomen abide", "abacus " * 17, "abacus abdomen abide zzzzqq",
                     "x" * 300, "abacus abdomen abide abl\x00aze", "абакус abdomen abide ablaze", None, 42]:
            self.assertIsNone(codenames.normalise_codename(text), repr(text)[:40])

    @settings(max_examples=300, deadline=None)
    @given(st.text(max_size=400))
    def test_any_text_normalises_to_none_or_a_canonical_list_of_known_words(self, text):
        result = codenames.normalise_codename(text)
        if result is not None:
            words = result.split(" ")
            self.assertTrue(codenames.MIN_WORDS <= len(words) <= codenames.MAX_WORDS)
            self.assertTrue(all(w in codenames.codename_words() for w in words))
            self.assertEqual(codenames.normalise_codename(result), result)

    @settings(max_examples=100, deadline=None)
    @given(st.lists(st.sampled_from(codenames.codename_words()), min_size=4, max_size=16),
           st.lists(st.sampled_from([" ", "  ", "\t", "\n", " \r\n ", ",", ", ", "-", ".", " - "]),
                    min_size=17, max_size=17))
    def test_any_spacing_of_real_words_round_trips(self, words, gaps):
        typed = gaps[0] + "".join((w.upper() if i % 2 else w) + gaps[i + 1] for i, w in enumerate(words))
        self.assertEqual(codenames.normalise_codename(typed), " ".join(words))


class FilenameTests(unittest.TestCase):
    def test_examples(self):
        cases = {
            "../../bin/gpg": "gpg", "C:\\Users\\me\\report.docx": "report.docx", "..": "document",
            ".bashrc": "bashrc", "CON": "_CON", "nul.txt": "_nul.txt", "a\x00b": "a_b", "": "document",
            "report.pdf": "report.pdf", "отчёт.pdf": "отчёт.pdf", "name\u202eexe.pdf": "name_exe.pdf",
        }
        for raw, expected in cases.items():
            self.assertEqual(sanitise_filename(raw), expected, repr(raw))

    def test_long_names_keep_their_extension_and_whole_characters(self):
        name = sanitise_filename("ж" * 400 + ".pdf")
        self.assertTrue(name.endswith(".pdf"))
        self.assertLessEqual(len(name.encode()), MAX_NAME_BYTES)
        name.encode("utf-8").decode("utf-8")

    @settings(max_examples=500, deadline=None)
    @given(st.text(max_size=600))
    def test_any_name_becomes_one_harmless_path_component(self, raw):
        name = sanitise_filename(raw)
        self.assertTrue(name)
        self.assertNotIn("/", name)
        self.assertNotIn("\\", name)
        self.assertNotIn("\x00", name)
        self.assertFalse(name.startswith("."))
        self.assertNotIn(name, (".", ".."))
        self.assertLessEqual(len(name.encode("utf-8")), MAX_NAME_BYTES)
        self.assertFalse(re.match(r"^(con|prn|aux|nul|com\d|lpt\d)(\..*)?$", name, re.I))
        self.assertFalse(any(ord(c) < 32 for c in name))
