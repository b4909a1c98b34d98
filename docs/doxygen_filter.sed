# Doxygen input filter for include/mdr/*.h (docs/Doxyfile): the public
# headers use plain C comments, which Doxygen ignores; this turns them into
# documentation comments on the way in (the headers stay as they are).
#   - the file's opening comment documents the file (@file);
#   - a comment opening a line documents what follows it;
#   - a comment after code on the same line documents that member (/**<).
1s|^/\* |/** @file\n * |
s|^\([ \t]*\)/\* |\1/** |
s|\([^ \t/][^/]*\)[ \t]\+/\* |\1 /**< |
