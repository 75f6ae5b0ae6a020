print("crash writer")
