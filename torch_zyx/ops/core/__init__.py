"""Creation, copies, views and movement, and the ops that change which storage a tensor views."""
