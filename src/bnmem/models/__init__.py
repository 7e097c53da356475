"""The model zoo, the norm layers, user model factories and the model spec an arm is rebuilt from."""
